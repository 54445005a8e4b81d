//! How a file is attached: as the stream's owner, or as one of the read-only kinds. The SQL
//! form is `ursula_attach`'s third argument; the napi addon and the npm package pass the same
//! text, so one parser decides for every caller.

use crate::error::Kind;
use crate::error::VfsError;

/// The mode names `ursula_attach(path, url, mode)` takes, in the order its error lists them.
pub const NAMES: &str = "'read_only', 'follow'";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Claims the stream and replicates every commit (no third argument, or `''`).
    Owner,
    /// Catches up once and claims nothing: the file holds the stream as of the attach.
    ReadOnly,
    /// A live read replica: catches up, then keeps applying the owner's commits as they reach
    /// the stream (see [`crate::follow`]). Claims nothing.
    Follow,
}

impl Mode {
    /// The mode `text` names; `''` is the owner, so bindings can always pass a string.
    pub fn parse(text: &str) -> Result<Mode, VfsError> {
        match text {
            "" => Ok(Mode::Owner),
            "read_only" => Ok(Mode::ReadOnly),
            "follow" => Ok(Mode::Follow),
            other => Err(VfsError::new(
                Kind::InvalidArgument,
                format!("unknown mode {other:?}; the modes are {NAMES}"),
            )),
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
    fn an_unknown_mode_is_refused_naming_the_modes() {
        let e = Mode::parse("readonly").expect_err("refused");
        assert_eq!(e.kind, Kind::InvalidArgument);
        assert!(e.message.contains("'read_only'"), "{}", e.message);
    }
}
