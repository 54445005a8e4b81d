//! `Stream-TTL` and `Stream-Expires-At`.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// `Stream-TTL`: a non-negative decimal integer of seconds, no sign, no leading zeros.
pub fn parse_ttl(raw: &str) -> Option<u64> {
    let digits_only = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (raw.len() > 1 && raw.starts_with('0')) {
        return None;
    }
    raw.parse::<u64>().ok().filter(|s| *s <= u64::MAX / 1000)
}

/// `Stream-Expires-At`: RFC 3339. Returns unix milliseconds (negative before 1970 clamps to 0).
pub fn parse_expires_at(raw: &str) -> Option<u64> {
    let at = OffsetDateTime::parse(raw.trim(), &Rfc3339).ok()?;
    let ms = at.unix_timestamp_nanos() / 1_000_000;
    Some(u64::try_from(ms).unwrap_or(0))
}

/// Formats unix milliseconds as RFC 3339 in UTC, for `Stream-Expires-At` on responses.
pub fn format_expires_at(unix_ms: u64) -> String {
    let nanos = i128::from(unix_ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| unix_ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_grammar() {
        assert_eq!(parse_ttl("3600"), Some(3600));
        assert_eq!(parse_ttl("0"), Some(0));
        for bad in ["+3600", "03600", "3600.0", "3.6e3", "-1", "", " 1"] {
            assert_eq!(parse_ttl(bad), None, "{bad}");
        }
    }

    #[test]
    fn expires_at_round_trips() {
        let ms = parse_expires_at("2030-01-02T03:04:05Z").expect("valid");
        assert_eq!(format_expires_at(ms), "2030-01-02T03:04:05Z");
        assert!(parse_expires_at("2030-01-02T03:04:05+01:00").is_some());
        assert!(parse_expires_at("tomorrow").is_none());
    }
}
