//! How a file is attached: as the stream's owner, or as one of the read-only kinds. The SQL
//! form is `ursula_attach`'s third argument; the napi addon and the npm package pass the same
//! text, so one parser decides for every caller.

use ursula_protocol::offset::Offset;

use crate::error::Kind;
use crate::error::VfsError;
use crate::format::offset_text;

/// The mode names `ursula_attach(path, url, mode)` takes, in the order its error lists them.
pub const NAMES: &str = "'read_only', 'follow', 'at:<offset>'";

/// The prefix of a point-in-time mode: `at:` and a stream offset (20 digits, or `-1`).
const AT: &str = "at:";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Claims the stream and replicates every commit (no third argument, or `''`).
    Owner,
    /// Catches up once and claims nothing: the file holds the stream as of the attach.
    ReadOnly,
    /// A live read replica: catches up, then keeps applying the owner's commits as they reach
    /// the stream (see [`crate::follow`]). Claims nothing.
    Follow,
    /// Read-only, as the database was after the last commit at or before the offset (`None`:
    /// `at:-1`, before any commit). Claims nothing, like [`Mode::ReadOnly`]
    /// (`crate::point_in_time`).
    At(Option<Offset>),
}

impl Mode {
    /// The mode `text` names; `''` is the owner, so bindings can always pass a string.
    pub fn parse(text: &str) -> Result<Mode, VfsError> {
        match text {
            "" => Ok(Mode::Owner),
            "read_only" => Ok(Mode::ReadOnly),
            "follow" => Ok(Mode::Follow),
            other => match other.strip_prefix(AT) {
                Some(offset) => offset_text::parse(offset).map(Mode::At).ok_or_else(|| {
                    VfsError::new(
                        Kind::InvalidArgument,
                        format!(
                            "mode {other:?}: at: takes a stream offset as the server writes it (20 digits) or -1, not {offset:?}"
                        ),
                    )
                }),
                None => Err(VfsError::new(
                    Kind::InvalidArgument,
                    format!("unknown mode {other:?}; the modes are {NAMES}"),
                )),
            },
        }
    }

    /// Whether the attach claims the stream and may write it.
    pub fn writes(self) -> bool {
        self == Mode::Owner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_is_the_owner_and_read_only_is_named() {
        assert_eq!(Mode::parse("").expect("owner"), Mode::Owner);
        assert_eq!(Mode::parse("read_only").expect("ro"), Mode::ReadOnly);
        assert!(Mode::Owner.writes());
        assert!(!Mode::ReadOnly.writes());
        assert_eq!(Mode::parse("follow").expect("follow"), Mode::Follow);
        assert!(!Mode::Follow.writes());
    }

    #[test]
    fn at_takes_a_twenty_digit_offset_or_minus_one_and_never_writes() {
        assert_eq!(
            Mode::parse("at:00000000000000000042").expect("at"),
            Mode::At(Some(Offset(42)))
        );
        assert_eq!(Mode::parse("at:-1").expect("at start"), Mode::At(None));
        assert!(!Mode::At(None).writes());
        for bad in [
            "at:",
            "at:42",
            "at:now",
            "at: 00000000000000000042",
            "at:-2",
        ] {
            let e = Mode::parse(bad).expect_err(bad);
            assert_eq!(e.kind, Kind::InvalidArgument, "{bad}");
            assert!(e.message.contains("20 digits"), "{}", e.message);
        }
    }

    #[test]
    fn an_unknown_mode_is_refused_naming_the_modes() {
        let e = Mode::parse("readonly").expect_err("refused");
        assert_eq!(e.kind, Kind::InvalidArgument);
        assert!(e.message.contains("'read_only'"), "{}", e.message);
    }
}
