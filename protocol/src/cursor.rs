//! The live-read cursor: a cache-busting interval counter, never a position.

/// Intervals are 20 s long, counted from 2024-10-09T00:00:00Z.
pub const INTERVAL_SECS: u64 = 20;
pub const EPOCH_UNIX_SECS: u64 = 1_728_432_000;

/// The interval number at `now_unix_ms`.
pub fn current_interval(now_unix_ms: u64) -> u64 {
    (now_unix_ms / 1000).saturating_sub(EPOCH_UNIX_SECS) / INTERVAL_SECS
}

/// The cursor to answer with. When the client's cursor is at or past the current interval the
/// answer must still move forward, by `jitter_secs` (1..=3600) worth of intervals, at least one.
pub fn next_cursor(now_unix_ms: u64, client: Option<&str>, jitter_secs: u64) -> u64 {
    let current = current_interval(now_unix_ms);
    match client.and_then(|c| c.parse::<u64>().ok()) {
        Some(c) if c >= current => {
            let step = (jitter_secs.clamp(1, 3600) / INTERVAL_SECS).max(1);
            c.saturating_add(step)
        }
        _ => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_moves_past_the_clients() {
        let now = (EPOCH_UNIX_SECS + 20_000) * 1000;
        assert_eq!(next_cursor(now, None, 5), 1000);
        assert_eq!(next_cursor(now, Some("999"), 5), 1000);
        assert_eq!(next_cursor(now, Some("1000"), 1000), 1050);
        assert_eq!(next_cursor(now, Some("5000"), 1), 5001);
    }
}
