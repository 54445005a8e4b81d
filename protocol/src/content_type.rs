//! Content types: the stored form, and how a stream's type decides JSON mode and SSE encoding.

/// The type of a stream created without `Content-Type`.
pub const OCTET_STREAM: &str = "application/octet-stream";
pub const NDJSON: &str = "application/x-ndjson";

/// Normalizes a media type: every token trimmed and lowercased, parameters joined with `"; "`.
/// Returns `None` for a value that is not `type/subtype[; name=value]*`.
pub fn normalize(raw: &str) -> Option<String> {
    // Nearly every append sends a bare type already in this form; taking it as it is skips
    // the splits, the trims and the lowercased copies, one pass instead of five.
    if is_bare_normal(raw) {
        return Some(raw.to_owned());
    }
    normalize_any(raw)
}

/// A bare `type/subtype` of lowercase token bytes: a value [`normalize_any`] returns unchanged.
fn is_bare_normal(raw: &str) -> bool {
    let mut slash = None;
    for (i, &b) in raw.as_bytes().iter().enumerate() {
        if b == b'/' {
            if slash.is_some() {
                return false;
            }
            slash = Some(i);
        } else if b.is_ascii_uppercase() || !is_token_byte(b) {
            return false;
        }
    }
    matches!(slash, Some(i) if i > 0 && i + 1 < raw.len())
}

fn normalize_any(raw: &str) -> Option<String> {
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
    !s.is_empty() && s.bytes().all(is_token_byte)
}

/// RFC 9110's `tchar`.
fn is_token_byte(b: u8) -> bool {
    TCHAR[b as usize]
}

/// [`is_token_byte`] as a table built at compile time: one load per byte on the append path,
/// where the checks in a row cost more than the rest of the shortcut.
const TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        i += 1;
    }
    t
};

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
    fn the_token_table_holds_exactly_rfc_9110_tchar() {
        let tchar: Vec<u8> = (0..=255u8).filter(|&b| is_token_byte(b)).collect();
        let mut expected: Vec<u8> = (b'0'..=b'9')
            .chain(b'A'..=b'Z')
            .chain(b'a'..=b'z')
            .collect();
        expected.extend_from_slice(b"!#$%&'*+-.^_`|~");
        expected.sort_unstable();
        assert_eq!(tchar, expected);
    }

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

    #[test]
    fn a_bare_lowercase_type_is_taken_as_it_is_and_anything_else_is_normalized() {
        for raw in [
            "application/octet-stream",
            "text/plain",
            "application/x-ndjson",
            "a/b",
        ] {
            assert!(is_bare_normal(raw), "{raw}");
            assert_eq!(normalize(raw).as_deref(), Some(raw));
        }
        for raw in [
            "Text/Plain",
            " a/b",
            "a/b ",
            "a/b/c",
            "/b",
            "a/",
            "ab",
            "a/b;c=d",
            "é/b",
        ] {
            assert!(!is_bare_normal(raw), "{raw}");
        }
        assert_eq!(normalize("a/b/c"), None);
        assert_eq!(normalize("/b"), None);
        assert_eq!(normalize("a/"), None);
    }

    proptest::proptest! {
        /// The shortcut never answers differently from the full normalization.
        #[test]
        fn the_shortcut_agrees_with_the_full_normalization(
            raw in "[a-cA-C0-9/;= \\t+.é\"-]{0,12}"
        ) {
            proptest::prop_assert_eq!(normalize(&raw), normalize_any(&raw));
        }

        /// The same, on values shaped like a type: one slash, near-token bytes either side.
        #[test]
        fn the_shortcut_agrees_on_values_shaped_like_a_type(
            raw in "[a-cB0-9+. -]{0,4}/[a-cB0-9+. ;-]{0,4}"
        ) {
            proptest::prop_assert_eq!(normalize(&raw), normalize_any(&raw));
        }
    }
}
