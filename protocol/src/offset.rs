//! Offsets: a byte position in the stream's stored bytes, written as 20 zero-padded decimal
//! digits so that string order equals numeric order.

use std::fmt;

/// Width of every offset token the server issues.
pub const WIDTH: usize = 20;

/// A concrete position in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub u64);

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.digits();
        f.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
    }
}

impl Offset {
    /// The token's 20 ASCII digits, zero-padded, written directly: a server answers one with
    /// nearly every request, and `format!("{:020}")` pads a growing `String` a character at a
    /// time. `u64::MAX` has exactly 20 digits, so every value fits.
    pub fn digits(self) -> [u8; WIDTH] {
        let mut out = [b'0'; WIDTH];
        let mut v = self.0;
        for slot in out.iter_mut().rev() {
            // `v % 10` is below 10: the cast cannot truncate.
            *slot = b'0' + (v % 10) as u8;
            v /= 10;
        }
        out
    }

    /// Parses an issued token: exactly 20 ASCII digits.
    pub fn parse(token: &str) -> Option<Offset> {
        if token.len() != WIDTH || !token.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        token.parse::<u64>().ok().map(Offset)
    }
}

/// What a client may put in `offset=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// `-1`, or no `offset` at all: the stream's beginning.
    Start,
    /// `now`: the current tail.
    Now,
    At(Offset),
}

impl ReadFrom {
    pub fn parse(token: &str) -> Option<ReadFrom> {
        match token {
            "-1" => Some(ReadFrom::Start),
            "now" => Some(ReadFrom::Now),
            other => Offset::parse(other).map(ReadFrom::At),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_what_the_formatter_writes_at_every_width() {
        let mut values = vec![0, u64::MAX, u64::from(u32::MAX)];
        for i in 0..20 {
            let p = 10u64.pow(i);
            values.extend([p, p - 1, p + 1, p.saturating_mul(7)]);
        }
        for v in values {
            assert_eq!(Offset(v).digits(), format!("{v:020}").as_bytes(), "{v}");
            assert_eq!(Offset(v).to_string(), format!("{v:020}"));
        }
    }

    #[test]
    fn offsets_are_twenty_digits_and_sort_as_strings() {
        assert_eq!(Offset(42).to_string(), "00000000000000000042");
        assert!(Offset(9).to_string() < Offset(10).to_string());
        assert_eq!(Offset::parse("00000000000000000042"), Some(Offset(42)));
    }

    #[test]
    fn short_signed_or_padded_tokens_are_refused() {
        for bad in [
            "42",
            "",
            "-2",
            "+0000000000000000042",
            "0000000000000000004a",
            "000000000000000000420",
        ] {
            assert_eq!(ReadFrom::parse(bad), None, "{bad}");
        }
        assert_eq!(ReadFrom::parse("-1"), Some(ReadFrom::Start));
        assert_eq!(ReadFrom::parse("now"), Some(ReadFrom::Now));
    }
}
