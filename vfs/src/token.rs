//! The process-wide bearer token: the one the application set (`ursula_set_token`, `setToken`),
//! else the one read from `URSULA_VFS_TOKEN_FILE`.
//!
//! The file is a Kubernetes projected token or one a sidecar refreshes, so it is read again
//! whenever it changes, and on demand after a 401. A file caught empty, half-written or missing
//! while it is replaced keeps the last token read from it: a request with a token that may still
//! be valid beats one with none.

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::{log, settings};

/// A file modified this recently may be written again within the same mtime tick with the same
/// length, which a stat cannot tell apart: such a file is read again on the next call.
const SETTLE: Duration = Duration::from_secs(2);

/// What a stat of the token file says about its content; equal stamps mean the content we read
/// is still current (once the file has settled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    /// Device and inode: a file replaced by rename or by a symlink swap (projected volumes) can
    /// have the same length and mtime as the one before.
    file_id: (u64, u64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        #[cfg(unix)]
        let file_id = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let file_id = (0, 0);
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            file_id,
        }
    }

    fn settled(&self) -> bool {
        match self.modified {
            Some(m) => m.elapsed().is_ok_and(|age| age >= SETTLE),
            None => false,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Set by the application; wins over the file while it is `Some`.
    set: Option<String>,
    /// The last token read from the file, kept while the file holds none.
    from_file: Option<String>,
    /// The stamp of the file when `from_file` was last confirmed; `None` forces a read.
    stamp: Option<Stamp>,
    /// `token_file_unreadable` was logged and the file has not held a token since.
    unreadable_logged: bool,
}

/// A token source: an application-set token over a token file. The process has one (`global`);
/// tests make their own.
#[derive(Debug)]
pub struct Tokens {
    file: Option<PathBuf>,
    state: Mutex<State>,
}

impl Tokens {
    pub fn new(file: Option<PathBuf>) -> Tokens {
        Tokens {
            file,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state consistent (every field is replaced
        // whole), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the application's token; `None` or a blank token returns to the file.
    pub fn set(&self, token: Option<String>) {
        let token = token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
        self.lock().set = token;
    }

    /// The token to send now: the set one, else the file's, read again if it changed.
    pub fn current(&self) -> Option<String> {
        self.get(false)
    }

    /// The token to send after a 401: like `current`, but the file is read again whatever its
    /// stamp says, since the token that was refused may have been replaced in place.
    pub fn current_after_refusal(&self) -> Option<String> {
        self.get(true)
    }

    fn get(&self, force: bool) -> Option<String> {
        let mut state = self.lock();
        if let Some(t) = &state.set {
            return Some(t.clone());
        }
        let path = self.file.as_deref()?;
        match read_token(path, if force { None } else { state.stamp }) {
            Read::Unchanged => {}
            Read::Token(token, stamp) => {
                state.from_file = Some(token);
                state.stamp = stamp.settled().then_some(stamp);
                state.unreadable_logged = false;
            }
            Read::NoToken(reason) => {
                // Read again next time: the writer may be halfway through.
                state.stamp = None;
                if !state.unreadable_logged {
                    state.unreadable_logged = true;
                    let kept = if state.from_file.is_some() {
                        "true"
                    } else {
                        "false"
                    };
                    log::event(
                        log::Level::Warn,
                        "token_file_unreadable",
                        &[
                            ("file", &path.to_string_lossy()),
                            ("reason", &reason),
                            ("kept_last_token", kept),
                        ],
                    );
                }
            }
        }
        state.from_file.clone()
    }
}

enum Read {
    /// The stamp matches the one the kept token was read under.
    Unchanged,
    Token(String, Stamp),
    /// The file holds no token now (missing, unreadable, empty), with why.
    NoToken(String),
}

fn read_token(path: &Path, known: Option<Stamp>) -> Read {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Read::NoToken(e.to_string()),
    };
    let stamp = Stamp::of(&meta);
    if known == Some(stamp) {
        return Read::Unchanged;
    }
    match std::fs::read(path) {
        Err(e) => Read::NoToken(e.to_string()),
        Ok(bytes) => match String::from_utf8(bytes) {
            Err(_) => Read::NoToken("not UTF-8".to_owned()),
            Ok(text) => {
                let token = text.trim();
                if token.is_empty() {
                    Read::NoToken("empty".to_owned())
                } else if token.chars().any(|c| c.is_control()) {
                    // A token spans one line; anything else is a file caught mid-write or not a
                    // token file, and would make an invalid header.
                    Read::NoToken("not a single-line token".to_owned())
                } else {
                    Read::Token(token.to_owned(), stamp)
                }
            }
        },
    }
}

static GLOBAL: LazyLock<Arc<Tokens>> = LazyLock::new(|| {
    Arc::new(Tokens::new(
        settings::get().token_file.as_ref().map(PathBuf::from),
    ))
});

/// The process's token source, reading `URSULA_VFS_TOKEN_FILE` if set.
pub fn global() -> Arc<Tokens> {
    Arc::clone(&GLOBAL)
}

/// Sets the process-wide token (`ursula_set_token`); `None` or `Some("")` returns to the file.
pub fn set_token(token: Option<String>) {
    GLOBAL.set(token)
}

/// The process-wide token to send now.
pub fn current() -> Option<String> {
    GLOBAL.current()
}

/// The process-wide token to send after a 401 (the file read again whatever its stamp).
pub fn current_after_refusal() -> Option<String> {
    GLOBAL.current_after_refusal()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh path in the temp dir, removed on drop.
    pub(crate) struct TempFile(pub PathBuf);

    impl TempFile {
        pub(crate) fn new(tag: &str) -> TempFile {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            TempFile(
                std::env::temp_dir().join(format!("ursula-vfs-{tag}-{}-{n}", std::process::id())),
            )
        }
        pub(crate) fn write(&self, text: &str) {
            std::fs::write(&self.0, text).expect("write temp file");
        }
        fn set_modified(&self, at: SystemTime) {
            std::fs::File::options()
                .write(true)
                .open(&self.0)
                .expect("open")
                .set_modified(at)
                .expect("set mtime");
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A token file holding `text` and a source reading it.
    fn file_source(text: &str) -> (TempFile, Tokens) {
        let f = TempFile::new("tok");
        f.write(text);
        let t = Tokens::new(Some(f.0.clone()));
        (f, t)
    }

    /// Asserts the token `t` sends now.
    #[track_caller]
    fn sends(t: &Tokens, want: &str) {
        assert_eq!(t.current().as_deref(), Some(want));
    }

    #[test]
    fn set_token_wins_over_file_until_unset() {
        let (_f, t) = file_source("from-file\n");
        sends(&t, "from-file");
        t.set(Some("app".into()));
        sends(&t, "app");
        assert_eq!(t.current_after_refusal().as_deref(), Some("app"));
        t.set(Some(String::new()));
        sends(&t, "from-file");
        t.set(Some("app".into()));
        t.set(None);
        sends(&t, "from-file");
    }

    #[test]
    fn no_file_no_token() {
        let t = Tokens::new(None);
        assert_eq!(t.current(), None);
        t.set(Some("  x  ".into()));
        sends(&t, "x");
    }

    #[test]
    fn file_is_read_again_when_it_changes() {
        let (f, t) = file_source("one");
        sends(&t, "one");
        // The second text is the same length as the first, written at once: the fresh mtime
        // keeps the stamp untrusted.
        for text in ["two-longer", "three-long"] {
            f.write(text);
            sends(&t, text);
        }
    }

    #[test]
    fn settled_file_is_not_read_again_unless_forced() {
        let f = TempFile::new("tok");
        f.write("old");
        let old = SystemTime::now() - Duration::from_secs(60);
        f.set_modified(old);
        let t = Tokens::new(Some(f.0.clone()));
        sends(&t, "old");
        // Rewritten in place with the same length and mtime: invisible to a stat...
        f.write("new");
        f.set_modified(old);
        sends(&t, "old");
        // ...but read after a 401.
        assert_eq!(t.current_after_refusal().as_deref(), Some("new"));
        sends(&t, "new");
    }

    #[test]
    fn empty_or_missing_file_keeps_last_token() {
        let (f, t) = file_source("kept\n");
        sends(&t, "kept");
        f.write("");
        sends(&t, "kept");
        std::fs::remove_file(&f.0).expect("remove");
        assert_eq!(t.current_after_refusal().as_deref(), Some("kept"));
        f.write("back");
        sends(&t, "back");
    }

    #[test]
    fn missing_file_from_the_start_gives_none() {
        let f = TempFile::new("tok");
        let t = Tokens::new(Some(f.0.clone()));
        assert_eq!(t.current(), None);
        f.write("later");
        sends(&t, "later");
    }
}
