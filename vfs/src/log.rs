//! Health events: one logfmt line each on stderr,
//! `sqlite-ursula-vfs level=warn event=poisoned file=... stream=... fenced=true reason="..."`.
//!
//! The spec lists the events an operator alerts on; they log at info and above, which is what
//! prints by default. Events outside that list (`attach_claimed`, `commit_refused`) are for
//! debugging a session and log at debug, which prints only with `URSULA_VFS_LOG=debug`.

use std::any::Any;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::OnceLock;

/// Ordered: a line prints when its level is at least the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    fn parse(s: &str) -> Option<Level> {
        [Level::Debug, Level::Info, Level::Warn, Level::Error]
            .into_iter()
            .find(|l| s.trim().eq_ignore_ascii_case(l.as_str()))
    }
}

/// The threshold when `URSULA_VFS_LOG` is unset or unreadable.
pub const DEFAULT_LEVEL: Level = Level::Info;

/// `URSULA_VFS_LOG`'s level, or why it was not used. Pure, so the rule is testable.
fn threshold_from(raw: Option<&str>) -> Result<Level, String> {
    match raw {
        None => Ok(DEFAULT_LEVEL),
        Some(v) => Level::parse(v).ok_or_else(|| v.to_owned()),
    }
}

/// Read once per process. Kept apart from [`crate::settings`], which logs through this module:
/// reading it here would re-enter its initialisation.
fn threshold() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    let mut bad: Option<String> = None;
    let level = *LEVEL.get_or_init(|| {
        let raw = std::env::var("URSULA_VFS_LOG").ok();
        threshold_from(raw.as_deref()).unwrap_or_else(|v| {
            bad = Some(v);
            DEFAULT_LEVEL
        })
    });
    if let Some(v) = bad {
        // Outside get_or_init: the threshold is set, so this line does not recurse.
        event(
            Level::Warn,
            "setting_adjusted",
            &[
                ("setting", "URSULA_VFS_LOG"),
                ("value", &v),
                ("used", DEFAULT_LEVEL.as_str()),
            ],
        );
    }
    level
}

/// Quotes a logfmt value when it holds a space, a quote, `=` or a control character.
pub fn value(v: &str) -> String {
    let plain = !v.is_empty()
        && v.chars()
            .all(|c| !c.is_whitespace() && c != '"' && c != '=' && !c.is_control());
    if plain {
        return v.to_owned();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Formats one event line (without the newline).
pub fn line(level: Level, event: &str, fields: &[(&str, &str)]) -> String {
    let mut s = format!("sqlite-ursula-vfs level={} event={}", level.as_str(), event);
    for (k, v) in fields {
        let _ = write!(s, " {}={}", k, value(v));
    }
    s
}

/// Writes one event line to stderr in a single write, so lines from threads never interleave.
/// Lines below `URSULA_VFS_LOG`'s level (info by default) are dropped.
pub fn event(level: Level, event: &str, fields: &[(&str, &str)]) {
    if level < threshold() {
        return;
    }
    let mut l = line(level, event, fields);
    l.push('\n');
    let _ = std::io::stderr().lock().write_all(l.as_bytes());
}

/// Writes an event about the database `file` replicated to `stream`: those two fields first,
/// then `fields`.
pub fn file_event(level: Level, name: &str, file: &str, stream: &str, fields: &[(&str, &str)]) {
    let mut all = Vec::with_capacity(fields.len() + 2);
    all.extend([("file", file), ("stream", stream)]);
    all.extend_from_slice(fields);
    event(level, name, &all);
}

/// The message a panic carried: `panic!("...")` and `expect` give a `&str` or a `String`;
/// any other payload has no text.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a text message)".to_owned())
}

/// The `panic` event line: the entry that panicked and the panic's message, as the spec asks.
pub fn panic_line(entry: &str, payload: &(dyn Any + Send)) -> String {
    line(
        Level::Error,
        "panic",
        &[("entry", entry), ("message", &panic_message(payload))],
    )
}

/// Logs a caught panic: every `catch_unwind` of the extension and the addon reports through
/// here, so none of them drops the message.
pub fn panic(entry: &str, payload: &(dyn Any + Send)) {
    event(
        Level::Error,
        "panic",
        &[("entry", entry), ("message", &panic_message(payload))],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_event_names_the_entry_and_the_panics_message() {
        let p = std::panic::catch_unwind(|| panic!("boom {}", 7)).expect_err("it panics");
        assert_eq!(
            panic_line("ursula_attach", p.as_ref()),
            "sqlite-ursula-vfs level=error event=panic entry=ursula_attach message=\"boom 7\""
        );
        let p = std::panic::catch_unwind(|| panic!("static")).expect_err("it panics");
        assert_eq!(panic_message(p.as_ref()), "static");
        let p = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).expect_err("it panics");
        assert_eq!(
            panic_message(p.as_ref()),
            "(a panic without a text message)"
        );
    }

    #[test]
    fn debug_events_print_only_when_ursula_vfs_log_asks_for_them() {
        assert_eq!(threshold_from(None), Ok(Level::Info));
        assert!(Level::Debug < threshold_from(None).unwrap_or(Level::Error));
        assert_eq!(threshold_from(Some("debug")), Ok(Level::Debug));
        assert_eq!(threshold_from(Some(" WARN ")), Ok(Level::Warn));
        assert_eq!(threshold_from(Some("loud")), Err("loud".to_owned()));
    }

    #[test]
    fn values_with_spaces_are_quoted() {
        assert_eq!(
            line(
                Level::Warn,
                "poisoned",
                &[("fenced", "true"), ("reason", "a \"b\" c")]
            ),
            "sqlite-ursula-vfs level=warn event=poisoned fenced=true reason=\"a \\\"b\\\" c\""
        );
        assert_eq!(value(""), "\"\"");
    }
}
