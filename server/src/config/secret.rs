//! The cluster's peer secret (`raft.peer_secret_file`, or `URSULA_PEER_SECRET`): what every
//! peer RPC carries so that a node can tell its peers from anyone else who reaches the port
//! its peer routes share with clients (`docs/security.md`).
//!
//! The secret is compared in constant time and never printed: its `Debug` is redacted, and a
//! refusal names the file or variable, never the value.

use std::path::Path;

use super::error::ConfigError;
use super::error::invalid;

/// The shortest secret a node accepts: 128 bits of hex, so it cannot be guessed by trying.
pub const MIN_LEN: usize = 32;

/// The environment variable that supplies the secret when the file names none.
pub const ENV: &str = "URSULA_PEER_SECRET";

/// A peer secret, at least [`MIN_LEN`] visible ASCII characters.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerSecret(std::sync::Arc<str>);

impl std::fmt::Debug for PeerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerSecret(<redacted>)")
    }
}

impl PeerSecret {
    /// Checks a secret's text (surrounding whitespace, a file's trailing newline included, is
    /// not part of it). `key` names where it came from in a refusal.
    pub fn parse(key: &'static str, text: &str) -> Result<PeerSecret, ConfigError> {
        let s = text.trim();
        if s.len() < MIN_LEN {
            return Err(invalid(
                key,
                format!(
                    "the peer secret is {} characters; it needs at least {MIN_LEN} (for example `openssl rand -hex 32`)",
                    s.len()
                ),
            ));
        }
        // It travels as an HTTP header value: visible ASCII only, so every peer reads the
        // same bytes.
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                key,
                "the peer secret must be visible ASCII characters without spaces",
            ));
        }
        Ok(PeerSecret(s.into()))
    }

    /// The secret as it travels.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this secret, in time that does not depend on where they differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_bytes().ct_eq(presented).into()
    }
}

/// The secret from `raft.peer_secret_file`, else from [`ENV`]; both set and different is a
/// mistake a node refuses to start with.
pub fn resolve(file: Option<&Path>, env: Option<&str>) -> Result<Option<PeerSecret>, ConfigError> {
    let from_file = match file {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                invalid(
                    "raft.peer_secret_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            Some(PeerSecret::parse("raft.peer_secret_file", &text)?)
        }
    };
    let from_env = env
        .filter(|v| !v.trim().is_empty())
        .map(|v| PeerSecret::parse("URSULA_PEER_SECRET", v))
        .transpose()?;
    match (from_file, from_env) {
        (Some(f), Some(e)) if f != e => Err(invalid(
            "raft.peer_secret_file",
            format!("names a secret other than {ENV}'s; set one of them"),
        )),
        (f, e) => Ok(f.or(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_secret_shorter_than_32_characters_or_with_spaces_is_refused() {
        assert!(PeerSecret::parse("k", &GOOD[..31]).is_err());
        assert!(PeerSecret::parse("k", &format!("{GOOD} x")).is_err());
        assert!(PeerSecret::parse("k", "é".repeat(32).as_str()).is_err());
        let s = PeerSecret::parse("k", &format!("  {GOOD}\n")).expect("trimmed");
        assert_eq!(s.expose(), GOOD);
    }

    #[test]
    fn a_secret_matches_only_its_own_bytes() {
        let s = PeerSecret::parse("k", GOOD).expect("secret");
        assert!(s.matches(GOOD.as_bytes()));
        assert!(!s.matches(&GOOD.as_bytes()[..31]));
        assert!(!s.matches(b""));
        let mut other = GOOD.as_bytes().to_vec();
        other[31] = b'0';
        assert!(!s.matches(&other));
    }

    #[test]
    fn the_secret_never_appears_in_debug_output() {
        let s = PeerSecret::parse("k", GOOD).expect("secret");
        assert!(!format!("{s:?}").contains(GOOD));
    }

    #[test]
    fn file_and_environment_must_agree_when_both_are_set() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("secret");
        std::fs::write(&path, format!("{GOOD}\n")).expect("write");
        let agreed = resolve(Some(&path), Some(GOOD)).expect("same secret");
        assert_eq!(agreed.map(|s| s.expose().to_owned()), Some(GOOD.into()));
        let other = GOOD.replace('0', "z");
        assert!(resolve(Some(&path), Some(&other)).is_err());
        assert!(resolve(None, Some("   ")).expect("blank env").is_none());
        assert!(resolve(Some(&dir.path().join("missing")), None).is_err());
    }
}
