//! Health events: one logfmt line each on stderr,
//! `sqlite-ursula-vfs level=warn event=poisoned file=... stream=... fenced=true reason="..."`.

use std::fmt::Write as _;
use std::io::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
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
pub fn event(level: Level, event: &str, fields: &[(&str, &str)]) {
    let mut l = line(level, event, fields);
    l.push('\n');
    let _ = std::io::stderr().lock().write_all(l.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

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
