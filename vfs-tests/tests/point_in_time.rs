//! Point-in-time attaches (`ursula_attach(path, url, 'at:<offset>')`) and the commit listing
//! (`ursula_commits`), against a real server: each recorded commit point rebuilds exactly its
//! rows, and after retention moved the points below the latest snapshot are refused naming it.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;
use serde_json::Value;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::server::header;
use ursula_vfs_tests::server::http;
use ursula_vfs_tests::sqlite::attach_mode;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::one;
use ursula_vfs_tests::sqlite::status;
use ursula_vfs_tests::wait_until;

fn attach_at(ctl: &Connection, path: &Path, url: &str, at: &str) -> rusqlite::Result<String> {
    attach_mode(ctl, path, url, &format!("at:{at}"))
}

fn offsets(listing: &Value) -> Vec<String> {
    listing["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .map(|c| c["offset"].as_str().expect("offset").to_owned())
        .collect()
}

/// The offset `n` bytes after `offset` (inside the frame that follows it).
fn plus(offset: &str, n: u64) -> String {
    format!("{:020}", offset.parse::<u64>().expect("offset digits") + n)
}

fn tail(url: &str) -> String {
    let (code, hs, _) = http("HEAD", url, &[], b"");
    assert_eq!(code, 200);
    header(&hs, "stream-next-offset").expect("tail").to_owned()
}

/// An owner that commits one row at a time; `points[k]` is the commit point (the status offset
/// after the commit) at which the table holds `k` rows, `points[0]` being the CREATE TABLE.
struct History {
    o: Owner,
    points: Vec<String>,
}

impl History {
    fn start(url: &str) -> History {
        let mut h = History {
            o: Owner::attach(url),
            points: Vec::new(),
        };
        h.record();
        h
    }

    fn record(&mut self) {
        let st = self.o.status();
        self.points
            .push(st["offset"].as_str().expect("offset").to_owned());
    }

    fn insert(&mut self, body: &str) {
        self.o.insert(body).expect("insert");
        self.record();
    }

    /// Attaches the file `at.db` beside the owner's at `at`.
    fn attach_at(&self, at: &str) -> rusqlite::Result<String> {
        attach_at(&self.o.ctl, &self.at_path(), &self.o.url, at)
    }

    fn at_path(&self) -> std::path::PathBuf {
        self.o.file("at.db")
    }

    /// The status of the file `at.db`.
    fn at_status(&self) -> Value {
        status(&self.o.ctl, &self.at_path())
    }

    /// The owner's stream's commit listing (`ursula_commits`).
    fn commits(&self, from: Option<&str>, limit: Option<i64>) -> rusqlite::Result<Value> {
        let text: String = self.o.ctl.query_row(
            "SELECT ursula_commits(?1, ?2, ?3)",
            (&self.o.url, from, limit),
            |r| r.get(0),
        )?;
        Ok(serde_json::from_str(&text).expect("listing JSON"))
    }

    /// The rows the owner had at `points[k]`.
    fn rows_at(k: usize) -> Vec<String> {
        (1..=k).map(|i| format!("note {i}")).collect()
    }
}

fn five_notes(server: &Server, name: &str) -> History {
    let mut h = History::start(&server.url(&format!("/demo/{name}")));
    for i in 1..=5 {
        h.insert(&format!("note {i}"));
    }
    h
}

#[test]
fn an_attach_at_each_commit_point_holds_exactly_the_rows_of_that_point() {
    let server = Server::start();
    let h = five_notes(&server, "points");
    assert_eq!(h.points.last().expect("points"), &tail(&h.o.url));
    // One file for every point, forwards then back: a file that holds another point (or the
    // latest state) is never trusted.
    let path = h.at_path();
    let order: Vec<usize> = (0..h.points.len()).chain([1, 0]).collect();
    for k in order {
        let p = &h.points[k];
        let got = h.attach_at(p).expect("attach at a commit point");
        assert_eq!(&got, p, "the attach answers the commit point it built");
        let c = Connection::open(&path).expect("open");
        assert_eq!(bodies(&c), History::rows_at(k), "rows at points[{k}]");
        assert!(integrity_ok(&c));
        let st = h.at_status();
        assert_eq!(st["offset"], p.as_str(), "{st}");
        assert_eq!(st["at"], p.as_str(), "{st}");
        assert_eq!(st["read_only"], true);
        assert_eq!(st["installed"], "-1", "no snapshot yet: {st}");
    }
    // Between two commit points (inside the frame of the third row): the point before it.
    let between = plus(&h.points[2], 5);
    assert_eq!(
        h.attach_at(&between).expect("attach between points"),
        h.points[2]
    );
    let c = Connection::open(&path).expect("open");
    assert_eq!(bodies(&c), History::rows_at(2));
    let st = h.at_status();
    assert_eq!(st["offset"], h.points[2].as_str());
    assert_eq!(st["at"], between.as_str());
    drop(c);
    // Before any commit: the empty database, in WAL mode.
    for start in ["-1", "00000000000000000000"] {
        assert_eq!(h.attach_at(start).expect("attach at the start"), "-1");
        let c = Connection::open(&path).expect("open");
        assert_eq!(
            one::<i64>(&c, "SELECT count(*) FROM sqlite_master"),
            0,
            "at {start}: no table yet"
        );
        assert_eq!(one::<String>(&c, "PRAGMA journal_mode"), "wal");
        assert_eq!(h.at_status()["at"], start);
    }
}

#[test]
fn writes_on_a_point_in_time_file_fail_with_sqlite_readonly_and_fence_nobody() {
    let server = Server::start();
    let mut h = five_notes(&server, "readonly");
    let before = tail(&h.o.url);
    let path = h.at_path();
    h.attach_at(&h.points[1]).expect("attach at");
    assert_eq!(
        tail(&h.o.url),
        before,
        "an at: attach appends nothing, no claim"
    );
    let c = Connection::open(&path).expect("open");
    let err = c
        .execute("INSERT INTO notes(body) VALUES ('no')", [])
        .expect_err("read-only");
    assert_eq!(code(&err) & 0xff, 8, "SQLITE_READONLY: {err}");
    assert_eq!(bodies(&c), History::rows_at(1));
    h.insert("note 6");
    assert_eq!(
        bodies(&h.o.db),
        History::rows_at(6),
        "the owner is not fenced"
    );
}

#[test]
fn an_offset_past_the_tail_or_not_an_offset_is_refused_before_any_file_changes() {
    let server = Server::start();
    let h = five_notes(&server, "past");
    let end = tail(&h.o.url);
    let path = h.at_path();
    let err = h.attach_at(&plus(&end, 1)).expect_err("past the tail");
    let m = err.to_string();
    assert!(m.contains("ursula_attach: invalid_argument:"), "{m}");
    assert!(m.contains(&format!("tail {end}")), "names the tail: {m}");
    assert!(!path.exists(), "nothing was created");
    for bad in ["42", "now", ""] {
        let err = h.attach_at(bad).expect_err("not an offset");
        assert!(
            err.to_string().contains("invalid_argument") && err.to_string().contains("20 digits"),
            "{err}"
        );
    }
    let missing = format!("{}/demo/nothing-here", server.base());
    let err = attach_at(&h.o.ctl, &path, &missing, "-1").expect_err("missing stream");
    assert!(
        err.to_string().contains("ursula_attach: not_found:"),
        "{err}"
    );
    assert_eq!(
        http("HEAD", &missing, &[], b"").0,
        404,
        "an at: attach never creates the stream"
    );
}

#[test]
fn the_listing_names_every_commit_point_in_order_and_pages_by_from_and_limit() {
    let server = Server::start();
    let h = five_notes(&server, "listing");
    let all = h.commits(None, None).expect("listing");
    assert_eq!(offsets(&all), h.points, "{all}");
    assert_eq!(all["earliest"], "-1");
    assert_eq!(all["snapshot"], "-1");
    assert_eq!(all["tail"], tail(&h.o.url).as_str());
    assert_eq!(all["more"], false);
    for c in all["commits"].as_array().expect("commits") {
        assert_eq!(c["epoch"], 1, "the owner's claim came first: {c}");
        assert!(c["pages"].as_u64().unwrap_or(0) >= 1, "{c}");
        assert!(c["db_pages"].as_u64().unwrap_or(0) >= 2, "{c}");
        assert!(c["bytes"].as_u64().unwrap_or(0) > 12, "{c}");
    }
    let after = h.commits(Some(&h.points[1]), None).expect("from");
    assert_eq!(offsets(&after), h.points[2..].to_vec());
    // `from` need not be a commit point.
    let mid = h
        .commits(Some(&plus(&h.points[1], 3)), None)
        .expect("from mid");
    assert_eq!(offsets(&mid), h.points[2..].to_vec());
    let page = h.commits(None, Some(2)).expect("limit");
    assert_eq!(offsets(&page), h.points[..2].to_vec());
    assert_eq!(page["more"], true);
    let next = h.commits(Some(&h.points[1]), Some(2)).expect("next page");
    assert_eq!(offsets(&next), h.points[2..4].to_vec());
    let last = h.commits(Some(&h.points[3]), Some(2)).expect("last page");
    assert_eq!(offsets(&last), h.points[4..].to_vec());
    assert_eq!(last["more"], false);
    // node:sqlite binds every JavaScript number as a REAL: a whole one is a limit too.
    let text: String =
        h.o.ctl
            .query_row("SELECT ursula_commits(?1, NULL, 2.0)", [&h.o.url], |r| {
                r.get(0)
            })
            .expect("a whole REAL limit");
    assert_eq!(serde_json::from_str::<Value>(&text).expect("JSON"), page);
    let err =
        h.o.ctl
            .query_row("SELECT ursula_commits(?1, NULL, 2.5)", [&h.o.url], |r| {
                r.get::<_, String>(0)
            })
            .expect_err("a fraction is no limit");
    assert!(
        err.to_string().contains("limit must be a positive integer"),
        "{err}"
    );
    for (from, limit) in [(Some("12"), None), (None, Some(0)), (None, Some(-3))] {
        let err = h.commits(from, limit).expect_err("bad argument");
        assert!(
            err.to_string()
                .contains("ursula_commits: invalid_argument:"),
            "{err}"
        );
    }
}

#[test]
fn once_retention_moved_a_point_below_the_latest_snapshot_is_refused_naming_it_and_one_after_opens()
{
    unsafe { std::env::set_var("URSULA_VFS_SNAPSHOT_MIN_BYTES", "65536") };
    let server = Server::start();
    let mut h = History::start(&server.url("/demo/retained"));
    let url = h.o.url.clone();
    let snapshot_of = |h: &History| {
        h.o.status()["snapshot"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let write = |h: &mut History, rows: usize| {
        for _ in 0..rows {
            let body: String = one(&h.o.db, "SELECT hex(randomblob(1500))");
            h.insert(&body);
        }
    };
    // The log outgrows the database (and the 64 KiB minimum): a first snapshot follows.
    while snapshot_of(&h) == "-1" {
        assert!(h.points.len() < 4000, "no snapshot: {}", h.o.status());
        write(&mut h, 10);
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = snapshot_of(&h);
    let path = h.at_path();
    let count = |c: &Connection| one::<i64>(c, "SELECT count(*) FROM notes") as usize;
    // The start is still readable: a point before the snapshot replays from it, one after
    // starts from the snapshot.
    h.attach_at(&h.points[3])
        .expect("before the first snapshot");
    assert_eq!(count(&Connection::open(&path).expect("open")), 3);
    assert_eq!(h.at_status()["installed"], "-1");
    assert_eq!(
        h.commits(None, Some(100_000)).expect("listing")["earliest"],
        "-1"
    );
    let k = h.points.len() - 1;
    h.attach_at(&h.points[k]).expect("after the first snapshot");
    assert_eq!(count(&Connection::open(&path).expect("open")), k);
    assert_eq!(h.at_status()["installed"], first.as_str());
    // A second snapshot moves retention to the first: history before it is gone, and only the
    // latest snapshot is readable.
    while snapshot_of(&h) == first {
        assert!(h.points.len() < 8000, "no second snapshot");
        write(&mut h, 10);
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_until("retention at the first snapshot", || {
        header(&http("HEAD", &url, &[], b"").1, "stream-retained-offset") == Some(first.as_str())
    });
    let latest = snapshot_of(&h);
    let (_, hs, _) = http("HEAD", &url, &[], b"");
    assert_eq!(header(&hs, "stream-snapshot-offset"), Some(latest.as_str()));
    let err = h.attach_at(&h.points[3]).expect_err("below the snapshot");
    let m = err.to_string();
    assert!(m.contains("ursula_attach: retained:"), "{m}");
    assert!(
        m.contains(&format!("the earliest reachable point is {latest}")),
        "names the latest snapshot {latest}: {m}"
    );
    // Between the retained offset and the latest snapshot the bytes are readable, but no
    // snapshot is there to start from.
    let err = h.attach_at(&first).expect_err("at the old snapshot");
    assert!(err.to_string().contains("retained"), "{err}");
    // At the snapshot: the rows of the last commit at or before it.
    let rows_at = |offset: &str| h.points.iter().filter(|p| p.as_str() <= offset).count() - 1;
    h.attach_at(&latest).expect("at the latest snapshot");
    let c = Connection::open(&path).expect("open");
    assert_eq!(count(&c), rows_at(&latest));
    assert!(integrity_ok(&c));
    drop(c);
    let st = h.at_status();
    assert_eq!(st["offset"], latest.as_str(), "{st}");
    assert_eq!(st["installed"], latest.as_str(), "{st}");
    // Every commit point after the snapshot opens, and the listing names exactly those.
    let after: Vec<String> = h
        .points
        .iter()
        .filter(|p| p.as_str() > latest.as_str())
        .cloned()
        .collect();
    let listing = h.commits(None, Some(100_000)).expect("listing");
    assert_eq!(listing["earliest"], latest.as_str());
    assert_eq!(listing["snapshot"], latest.as_str());
    assert_eq!(offsets(&listing), after);
    assert!(!after.is_empty(), "commits came after the snapshot");
    for p in [&after[0], &after[after.len() - 1]] {
        assert_eq!(&h.attach_at(p).expect("after the snapshot"), p);
        let c = Connection::open(&path).expect("open");
        assert_eq!(count(&c), rows_at(p));
        assert_eq!(
            bodies(&c),
            bodies(&h.o.db)[..rows_at(p)].to_vec(),
            "the same rows as the owner had"
        );
    }
}
