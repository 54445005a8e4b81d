//! The value types of the config file: byte sizes and durations.

use serde::Deserialize;

/// A byte size: an integer, or a string such as `"64MiB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SizeRepr")]
pub struct Size(pub u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(u64),
    Text(String),
}

/// A config value that is not a size or a duration; serde puts the key in front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("{0:?} is not a size like \"64MiB\"")]
    Size(String),
    #[error("{0:?} is not a duration like \"5s\"")]
    Duration(String),
}

impl TryFrom<SizeRepr> for Size {
    type Error = UnitError;
    fn try_from(r: SizeRepr) -> Result<Size, UnitError> {
        match r {
            SizeRepr::Int(n) => Ok(Size(n)),
            SizeRepr::Text(s) => parse_size(&s).map(Size).ok_or(UnitError::Size(s)),
        }
    }
}

pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// A duration: a string such as `"500ms"`, `"5s"`, `"5m"`, `"1h"`, or `"0"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Dur(pub std::time::Duration);

impl TryFrom<String> for Dur {
    type Error = UnitError;
    fn try_from(s: String) -> Result<Dur, UnitError> {
        parse_duration(&s).map(Dur).ok_or(UnitError::Duration(s))
    }
}

pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ms = match unit {
        "ms" => n,
        "s" | "" if unit == "s" || n == 0 => n.checked_mul(1000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(std::time::Duration::from_millis(ms))
}
