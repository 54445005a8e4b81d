//! `Stream-Seq` and producer header values.

/// Longest `Stream-Seq` and `Producer-Id`, in bytes.
pub const MAX_SEQ_BYTES: usize = 256;
pub const MAX_PRODUCER_ID_BYTES: usize = 256;
/// Largest `Producer-Epoch` / `Producer-Seq`: 2^53 - 1, so JavaScript clients keep exact values.
pub const MAX_PRODUCER_NUMBER: u64 = (1 << 53) - 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamSeq {
    /// Compared and stored.
    Checked(Vec<u8>),
    /// Holds a byte outside printable ASCII: the append is not checked and nothing is stored.
    Ignored,
}

/// Interprets a raw `Stream-Seq` value; `Err` carries the 400 message.
pub fn parse_stream_seq(raw: &[u8]) -> Result<StreamSeq, String> {
    if raw.len() > MAX_SEQ_BYTES {
        return Err(format!(
            "Stream-Seq is {} bytes; the limit is {MAX_SEQ_BYTES}",
            raw.len()
        ));
    }
    if raw.iter().all(|b| (0x20..=0x7e).contains(b)) {
        Ok(StreamSeq::Checked(raw.to_vec()))
    } else {
        Ok(StreamSeq::Ignored)
    }
}

/// Parses `Producer-Epoch` / `Producer-Seq`: plain decimal, no sign, at most 2^53 - 1.
pub fn parse_producer_number(raw: &str) -> Option<u64> {
    if raw.is_empty() || raw.len() > 16 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse::<u64>()
        .ok()
        .filter(|n| *n <= MAX_PRODUCER_NUMBER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_seq_limits() {
        assert_eq!(
            parse_stream_seq(b"abc"),
            Ok(StreamSeq::Checked(b"abc".to_vec()))
        );
        assert_eq!(parse_stream_seq("é".as_bytes()), Ok(StreamSeq::Ignored));
        assert!(parse_stream_seq(&[b'a'; 257]).is_err());
        assert!(parse_stream_seq(&[b'a'; 256]).is_ok());
    }

    #[test]
    fn producer_numbers() {
        assert_eq!(parse_producer_number("0"), Some(0));
        assert_eq!(
            parse_producer_number("9007199254740991"),
            Some(MAX_PRODUCER_NUMBER)
        );
        for bad in [
            "9007199254740992",
            "-1",
            "+1",
            "1.0",
            "",
            "abc",
            "99999999999999999999",
        ] {
            assert_eq!(parse_producer_number(bad), None, "{bad}");
        }
    }
}
