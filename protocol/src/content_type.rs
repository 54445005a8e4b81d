//! Content types: the stored form, and how a stream's type decides JSON mode and SSE encoding.

/// The type of a stream created without `Content-Type`.
pub const OCTET_STREAM: &str = "application/octet-stream";
pub const NDJSON: &str = "application/x-ndjson";

/// Normalizes a media type: every token trimmed and lowercased, parameters joined with `"; "`.
/// Returns `None` for a value that is not `type/subtype[; name=value]*`.
pub fn normalize(raw: &str) -> Option<String> {
    let mut parts = raw.split(';');
    let mut out = parts.next()?.trim().to_ascii_lowercase();
    let (ty, sub) = out.split_once('/')?;
    if !is_token(ty) || !is_token(sub) {
        return None;
    }
    for param in parts {
        let param = param.trim();
        if param.is_empty() {
            continue;
        }
        let (name, value) = param.split_once('=')?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim().to_ascii_lowercase();
        if !is_token(&name) || value.is_empty() {
            return None;
        }
        out.push_str("; ");
        out.push_str(&name);
        out.push('=');
        out.push_str(&value);
    }
    Some(out)
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn essence(normalized: &str) -> &str {
    normalized.split(';').next().unwrap_or(normalized).trim()
}

/// JSON mode: the essence is exactly `application/json`, parameters or not.
pub fn is_json(normalized: &str) -> bool {
    essence(normalized) == "application/json"
}

/// SSE sends `text/*` and JSON as text; every other type as base64.
pub fn is_sse_text(normalized: &str) -> bool {
    essence(normalized).starts_with("text/") || is_json(normalized)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_lowercases_and_joins_parameters() {
        assert_eq!(
            normalize("Application/JSON").as_deref(),
            Some("application/json")
        );
        assert_eq!(
            normalize(" text/plain ;Charset=UTF-8 ").as_deref(),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(normalize("nonsense"), None);
        assert_eq!(normalize("a/b; x"), None);
        assert!(is_json("application/json; charset=utf-8"));
        assert!(!is_json("application/x-ndjson"));
        assert!(is_sse_text("text/plain"));
        assert!(!is_sse_text("application/ndjson"));
    }
}
