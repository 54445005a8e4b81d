//! Incarnations: 64-bit identities written as 16 lowercase hex digits. A stream's
//! `Stream-Incarnation` changes when the stream is deleted and created again; a node's
//! `process_incarnation` changes with every process start and binds admin mutations to the
//! process an operator observed. Text, not a JSON number: JSON tools read big integers as
//! doubles and would change them.

use std::fmt;
use std::str::FromStr;

/// Digits in the wire form.
pub const WIDTH: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Incarnation(pub u64);

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.digits();
        f.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
    }
}

impl Incarnation {
    /// The token's 16 lowercase hex digits, written directly (see `Offset::digits`).
    pub fn digits(self) -> [u8; WIDTH] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [b'0'; WIDTH];
        let mut v = self.0;
        for slot in out.iter_mut().rev() {
            *slot = HEX[(v & 0xf) as usize];
            v >>= 4;
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an incarnation is 16 lowercase hex digits")]
pub struct IncarnationError;

impl Incarnation {
    /// Parses the wire form: exactly 16 digits of `0-9a-f`.
    pub fn parse(raw: &str) -> Option<Incarnation> {
        let ok = raw.len() == WIDTH
            && raw
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !ok {
            return None;
        }
        u64::from_str_radix(raw, 16).ok().map(Incarnation)
    }
}

impl FromStr for Incarnation {
    type Err = IncarnationError;
    fn from_str(s: &str) -> Result<Incarnation, IncarnationError> {
        Incarnation::parse(s).ok_or(IncarnationError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_what_the_formatter_writes_for_every_nibble_count() {
        let mut values = vec![0, u64::MAX, 0x00ab_cdef_0123_4567];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((1..64).map(|b| (1u64 << b) - 1));
        for v in values {
            assert_eq!(
                Incarnation(v).digits(),
                format!("{v:016x}").as_bytes(),
                "{v}"
            );
            assert_eq!(Incarnation(v).to_string(), format!("{v:016x}"));
        }
    }

    #[test]
    fn incarnations_round_trip_as_sixteen_lowercase_hex_digits() {
        let i = Incarnation(0x00ab_cdef_0123_4567);
        assert_eq!(i.to_string(), "00abcdef01234567");
        assert_eq!(Incarnation::parse("00abcdef01234567"), Some(i));
        assert_eq!("ffffffffffffffff".parse(), Ok(Incarnation(u64::MAX)));
    }

    #[test]
    fn other_spellings_are_refused() {
        for bad in [
            "",
            "abc",
            "00ABCDEF01234567",
            "0x abcdef0123456",
            "00abcdef012345678",
        ] {
            assert_eq!(Incarnation::parse(bad), None, "{bad}");
        }
    }
}
