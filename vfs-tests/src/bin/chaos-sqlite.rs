//! The SQLite client of a fault run (`ursula-chaos`, docs/reliability.md): an owner that
//! commits one numbered row at a time through the extension and a live follower of the same
//! stream, until a stop file appears. Then it makes one last commit, rebuilds the database
//! from the stream on a third path, and checks the three against each other and against what
//! the owner was told:
//! - every acknowledged commit is in the rebuild, and nothing that was never tried is;
//! - the owner's database equals the rebuild, and so does the follower once it has caught up;
//! - every file passes `PRAGMA integrity_check`.
//!
//! `chaos-sqlite URL DIR` writes `DIR/sqlite.json` (`{acked, unknown, reattached, rows,
//! anomalies}`) and exits 0 when nothing is wrong, 1 otherwise, 2 when it could not run.

use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use rusqlite::Connection;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::control;
use ursula_vfs_tests::sqlite::integrity_ok;
use ursula_vfs_tests::sqlite::status;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A row's filler: big enough that commits touch more than one page now and then.
const PAD: usize = 300;

struct Owner {
    ctl: Connection,
    path: PathBuf,
    url: String,
    conn: Option<Connection>,
    reattached: u64,
}

impl Owner {
    /// The owner's connection, attaching (again) first when it has none.
    fn conn(&mut self) -> Option<&Connection> {
        if self.conn.is_none() {
            if let Err(e) = attach(&self.ctl, &self.path, &self.url) {
                eprintln!("chaos-sqlite: attach: {e}");
                return None;
            }
            self.reattached += 1;
            let c = Connection::open(&self.path).ok()?;
            c.execute_batch(
                "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, n INTEGER UNIQUE, pad TEXT)",
            )
            .ok()?;
            self.conn = Some(c);
        }
        self.conn.as_ref()
    }

    /// Commits row `n`: `Some(true)` acknowledged, `Some(false)` failed. A failure whose
    /// status asks for more than a retry drops the connection, so the next call attaches again.
    fn commit(&mut self, n: u64) -> Option<bool> {
        let conn = self.conn()?;
        match conn.execute(
            "INSERT INTO t(n, pad) VALUES (?1, ?2)",
            (n as i64, "x".repeat(PAD)),
        ) {
            Ok(_) => Some(true),
            Err(e) => {
                let s = status(&self.ctl, &self.path);
                if s["error"]["action"] != "retry" {
                    eprintln!("chaos-sqlite: commit {n} failed ({e}); attaching again: {s}");
                    self.conn = None;
                }
                Some(false)
            }
        }
    }
}

fn rows(conn: &Connection) -> Res<Vec<u64>> {
    let mut st = conn.prepare("SELECT n FROM t ORDER BY n")?;
    let out = st
        .query_map([], |r| r.get::<_, i64>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(out.into_iter().map(|n| n as u64).collect())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(dir)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: chaos-sqlite URL DIR");
        std::process::exit(2);
    };
    match run(url, Path::new(dir)) {
        Ok(clean) => std::process::exit(if clean { 0 } else { 1 }),
        Err(e) => {
            eprintln!("chaos-sqlite: {e}");
            std::process::exit(2);
        }
    }
}

fn run(url: &str, dir: &Path) -> Res<bool> {
    let stop = dir.join("stop");
    let mut owner = Owner {
        ctl: control(),
        path: dir.join("owner.db"),
        url: url.to_owned(),
        conn: None,
        reattached: 0,
    };
    // The first attach creates the stream; the cluster is healthy then.
    let began = Instant::now();
    while owner.conn().is_none() {
        if began.elapsed() > Duration::from_secs(60) {
            return Err("the owner never attached".into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    owner.reattached = 0;
    owner.commit(0);
    let follower = dir.join("follower.db");
    owner.ctl.query_row(
        "SELECT ursula_attach(?1, ?2, 'follow')",
        (follower.display().to_string(), url),
        |r| r.get::<_, String>(0),
    )?;

    let (mut acked, mut unknown) = (BTreeSet::new(), BTreeSet::new());
    let mut n = 1u64;
    while !stop.exists() {
        match owner.commit(n) {
            Some(true) => {
                acked.insert(n);
            }
            Some(false) => {
                unknown.insert(n);
                std::thread::sleep(Duration::from_millis(200));
            }
            // Not attached (the cluster may be cut off): nothing was sent for `n`.
            None => {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        }
        n += 1;
    }
    // One last commit, retried until acknowledged, brings the owner level with its stream.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match owner.commit(n) {
            Some(true) => {
                acked.insert(n);
                break;
            }
            Some(false) => {
                unknown.insert(n);
                n += 1;
            }
            None => {}
        }
        if Instant::now() > deadline {
            return Err("the last commit was never acknowledged".into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut anomalies = Vec::new();
    let owner_rows = match owner.conn() {
        Some(c) => {
            if !integrity_ok(c) {
                anomalies.push("the owner's database fails integrity_check".to_owned());
            }
            rows(c)?
        }
        None => return Err("the owner lost its connection after its last commit".into()),
    };
    let rebuild = dir.join("rebuild.db");
    attach_read_only(&owner.ctl, &rebuild, url)?;
    let rebuilt = Connection::open(&rebuild)?;
    if !integrity_ok(&rebuilt) {
        anomalies.push("the rebuild fails integrity_check".to_owned());
    }
    let rebuilt_rows = rows(&rebuilt)?;
    let in_rebuild: BTreeSet<u64> = rebuilt_rows.iter().copied().collect();
    for a in &acked {
        if !in_rebuild.contains(a) {
            anomalies.push(format!("acknowledged commit {a} is not in the rebuild"));
        }
    }
    for r in &in_rebuild {
        if !acked.contains(r) && !unknown.contains(r) && *r != 0 {
            anomalies.push(format!("row {r} is in the rebuild but was never committed"));
        }
    }
    if owner_rows != rebuilt_rows {
        anomalies.push(format!(
            "the owner's database ({} rows) differs from the rebuild ({} rows)",
            owner_rows.len(),
            rebuilt_rows.len()
        ));
    }
    let owner_offset = status(&owner.ctl, &owner.path)["offset"].clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    let follower_rows = loop {
        let s = status(&owner.ctl, &follower);
        if s["offset"] == owner_offset {
            let c = Connection::open(&follower)?;
            if !integrity_ok(&c) {
                anomalies.push("the follower's database fails integrity_check".to_owned());
            }
            break rows(&c)?;
        }
        if Instant::now() > deadline || s["following"] == false {
            anomalies.push(format!(
                "the follower did not reach the owner's offset {owner_offset}: {s}"
            ));
            break rebuilt_rows.clone();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if follower_rows != rebuilt_rows {
        anomalies.push(format!(
            "the follower's database ({} rows) differs from the rebuild ({} rows)",
            follower_rows.len(),
            rebuilt_rows.len()
        ));
    }
    let report = serde_json::json!({
        "acked": acked.len(),
        "unknown": unknown.len(),
        "reattached": owner.reattached,
        "rows": rebuilt_rows.len(),
        "anomalies": anomalies,
    });
    std::fs::write(dir.join("sqlite.json"), serde_json::to_vec_pretty(&report)?)?;
    Ok(anomalies.is_empty())
}
