//! The setup most tests start from: a database attached as the owner of a stream, in a
//! directory of its own, with the `notes` table committed.

use std::path::PathBuf;

use rusqlite::Connection;

use crate::server::Server;
use crate::sqlite::attach_read_only;
use crate::sqlite::control;
use crate::sqlite::open_owner;

/// Fields drop in order: the connections before the directory they live in.
pub struct Owner {
    pub db: Connection,
    /// The control connection that attached it.
    pub ctl: Connection,
    /// The owner's file, `a.db` in [`Owner::dir`].
    pub path: PathBuf,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl Owner {
    /// The owner of `url`, attached through a new control connection.
    pub fn attach(url: &str) -> Owner {
        Owner::attach_with(control(), url)
    }

    /// A new server, and the owner of its stream at `path` (`/demo/notes`, say).
    pub fn on_new_server(path: &str) -> (Server, Owner) {
        let server = Server::start();
        let owner = Owner::attach(&server.url(path));
        (server, owner)
    }

    /// The owner of `url`, attached through `ctl` (a control connection the test prepared: a
    /// token set, say).
    pub fn attach_with(ctl: Connection, url: &str) -> Owner {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.db");
        let db = open_owner(&ctl, &path, url);
        Owner {
            db,
            ctl,
            path,
            url: url.to_owned(),
            dir,
        }
    }

    /// Commits one row of `notes`.
    pub fn insert(&self, body: &str) -> rusqlite::Result<usize> {
        crate::sqlite::insert(&self.db, body)
    }

    /// The owner's `ursula_status`.
    pub fn status(&self) -> serde_json::Value {
        crate::sqlite::status(&self.ctl, &self.path)
    }

    /// The `ursula_status` of the file `name` beside the owner's.
    pub fn status_of(&self, name: &str) -> serde_json::Value {
        crate::sqlite::status(&self.ctl, &self.file(name))
    }

    /// A file `name` beside the owner's.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A read-only rebuild of the owner's stream into the file `name` beside the owner's, opened.
    pub fn rebuild(&self, name: &str) -> Connection {
        let copy = self.file(name);
        attach_read_only(&self.ctl, &copy, &self.url).expect("read-only rebuild");
        Connection::open(&copy).expect("open the rebuild")
    }
}
