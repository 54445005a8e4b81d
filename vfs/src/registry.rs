//! Process-wide state: which files are attached, which attaches failed, and the lock files the
//! process holds until it exits.

use std::collections::HashMap;
use std::collections::HashSet;
use std::fs::File;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::OnceLock;

use crate::db::Db;
use crate::error::Kind;

#[derive(Debug, Default)]
pub struct Registry {
    attached: Mutex<HashMap<PathBuf, Arc<Db>>>,
    /// Files whose last attach failed after it started changing things: they stay locked out.
    failed: Mutex<HashMap<PathBuf, (Kind, String)>>,
    /// `-ursula.lock` files, flock'd and never closed: a process holds every file it attached.
    locks: Mutex<HashMap<PathBuf, File>>,
    /// Files an attach is running on. The host lock keeps other processes out, but not a
    /// second attach in this one: attaches run on any thread (the Node addon's `attachAsync` on
    /// libuv's pool), and two of one file would catch it up and claim the stream at once.
    attaching: Mutex<HashSet<PathBuf>>,
}

/// A running attach's hold on its file, released when dropped.
#[derive(Debug)]
pub struct Attaching<'r> {
    registry: &'r Registry,
    path: PathBuf,
}

impl Drop for Attaching<'_> {
    fn drop(&mut self) {
        lock(&self.registry.attaching).remove(&self.path);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn global() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// The one spelling of a database path: absolute, with the directory's symlinks resolved.
pub fn canonical(path: &str) -> PathBuf {
    let p = Path::new(path);
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or(abs),
        _ => abs,
    }
}

pub fn sibling(db: &Path, suffix: &str) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

impl Registry {
    pub fn attached(&self, path: &Path) -> Option<Arc<Db>> {
        lock(&self.attached).get(path).cloned()
    }

    pub fn set_attached(&self, db: Arc<Db>) {
        lock(&self.failed).remove(&db.path);
        lock(&self.attached).insert(db.path.clone(), db);
    }

    pub fn detach(&self, path: &Path) -> Option<Arc<Db>> {
        lock(&self.attached).remove(path)
    }

    pub fn failed(&self, path: &Path) -> Option<(Kind, String)> {
        lock(&self.failed).get(path).cloned()
    }

    pub fn set_failed(&self, path: &Path, kind: Kind, reason: String) {
        lock(&self.failed).insert(path.to_path_buf(), (kind, reason));
    }

    /// Takes the host lock of `db` for the rest of the process's life. `Ok(false)`: another
    /// process holds it.
    pub fn take_host_lock(&self, db: &Path) -> std::io::Result<bool> {
        let mut locks = lock(&self.locks);
        if locks.contains_key(db) {
            return Ok(true);
        }
        let path = sibling(db, "-ursula.lock");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        // flock(LOCK_EX | LOCK_NB) on Linux, as the lock file is documented to be taken.
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        locks.insert(db.to_path_buf(), f);
        Ok(true)
    }

    /// Marks an attach of `path` as running; `None` while another one is.
    pub fn begin_attach(&self, path: &Path) -> Option<Attaching<'_>> {
        lock(&self.attaching)
            .insert(path.to_path_buf())
            .then(|| Attaching {
                registry: self,
                path: path.to_path_buf(),
            })
    }

    pub fn holds_host_lock(&self, db: &Path) -> bool {
        lock(&self.locks).contains_key(db)
    }
}
