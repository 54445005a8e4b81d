//! Benchmark of the extension: a one-row INSERT commit through the VFS against a local
//! single-node `ursula`, beside the same commit on plain SQLite in WAL mode, in one run; and a
//! rebuild of a 100 MiB database on a new host (MB/s, peak RSS of the rebuilding process).
//!
//! Run with `scripts/bench-vfs.sh` (release build). Prints a markdown table.

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use std::time::Instant;

use rusqlite::Connection;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::attach_read_only;
use ursula_vfs_tests::sqlite::control;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(idx).copied().unwrap_or_default()
}

struct Run {
    label: &'static str,
    commits_per_s: f64,
    p50: Duration,
    p99: Duration,
}

fn one_row_commits(label: &'static str, db: &Connection, n: usize) -> Res<Run> {
    db.execute(
        "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT)",
        [],
    )?;
    let mut stmt = db.prepare("INSERT INTO notes(body) VALUES (?1)")?;
    for i in 0..50 {
        stmt.execute([format!("warm-up {i}")])?;
    }
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        stmt.execute([format!("note number {i}")])?;
        lat.push(t.elapsed());
    }
    let total = start.elapsed();
    lat.sort_unstable();
    Ok(Run {
        label,
        commits_per_s: n as f64 / total.as_secs_f64(),
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
    })
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Child mode: rebuild `url` into `path`, print `seconds hwm_kib`.
fn rebuild_child(path: &str, url: &str) -> Res<()> {
    let ctl = control();
    let start = Instant::now();
    attach_read_only(&ctl, Path::new(path), url)?;
    println!("{} {}", start.elapsed().as_secs_f64(), vm_hwm_kib());
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--rebuild-child") {
        return rebuild_child(&args[2], &args[3]);
    }
    let commits: usize = std::env::var("VFS_BENCH_COMMITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let rebuild_mib: usize = std::env::var("VFS_BENCH_REBUILD_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir()?;

    let plain = Connection::open(dir.path().join("plain.db"))?;
    plain.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))?;
    let plain_run = one_row_commits("plain SQLite, WAL", &plain, commits)?;
    drop(plain);

    let server = Server::start();
    let ctl = control();
    let path = dir.path().join("vfs.db");
    let url = format!("{}/bench/commits", server.base());
    attach(&ctl, &path, &url)?;
    let vfs = Connection::open(&path)?;
    let vfs_run = one_row_commits("sqlite-ursula-vfs, loopback ursula", &vfs, commits)?;
    drop(vfs);

    // A 100 MiB database of incompressible rows, written in 4 MiB transactions.
    let big_path = dir.path().join("big.db");
    let big_url = format!("{}/bench/rebuild", server.base());
    attach(&ctl, &big_path, &big_url)?;
    let big = Connection::open(&big_path)?;
    big.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, b BLOB)", [])?;
    for _ in 0..(rebuild_mib / 4).max(1) {
        big.execute_batch("BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 1000) INSERT INTO blobs(b) SELECT randomblob(4000) FROM n; COMMIT;")?;
    }
    let db_bytes = std::fs::metadata(&big_path)?.len()
        + std::fs::metadata(big_path.with_file_name("big.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    drop(big);
    let out = Command::new(std::env::current_exe()?)
        .args([
            "--rebuild-child",
            &dir.path().join("rebuilt.db").display().to_string(),
            &big_url,
        ])
        .stderr(std::process::Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    let secs: f64 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or("rebuild child printed no time")?;
    let hwm: u64 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let rebuilt = std::fs::metadata(dir.path().join("rebuilt.db"))?.len();

    let ms = |d: Duration| format!("{:.3}", d.as_secs_f64() * 1000.0);
    println!("| commit of a one-row INSERT | commits/s | p50 ms | p99 ms |");
    println!("| --- | ---: | ---: | ---: |");
    for r in [&plain_run, &vfs_run] {
        println!(
            "| {} | {:.0} | {} | {} |",
            r.label,
            r.commits_per_s,
            ms(r.p50),
            ms(r.p99)
        );
    }
    println!(
        "| added by the VFS (p50) | | {} | |",
        ms(vfs_run.p50.saturating_sub(plain_run.p50))
    );
    println!();
    println!(
        "| rebuild on a new host | database | seconds | MB/s | peak RSS of the rebuilding process |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    println!(
        "| {} MiB of random rows, 4 MiB transactions | {:.1} MiB | {:.2} | {:.1} | {:.1} MiB |",
        rebuild_mib,
        rebuilt as f64 / 1048576.0,
        secs,
        rebuilt as f64 / 1e6 / secs,
        hwm as f64 / 1024.0
    );
    eprintln!(
        "(source database {:.1} MiB incl. WAL; {commits} commits per row of the first table)",
        db_bytes as f64 / 1048576.0
    );
    Ok(())
}
