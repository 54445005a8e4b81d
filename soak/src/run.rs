//! One soak: rounds of concurrent writes with faults between and during them, a sample after
//! each round, and at the end a read-back of every byte every live stream still holds.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::client::Answer;
use crate::client::Client;
use crate::client::ClientError;
use crate::client::header;
use crate::cluster::BucketSample;
use crate::cluster::NodeSample;
use crate::cluster::SoakCluster;
use crate::model::Piece;
use crate::model::StreamModel;
use crate::spec::Spec;

const MIB: u64 = 1 << 20;
const OCTET: (&str, &str) = ("content-type", "application/octet-stream");

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{what} {path}: unexpected {status} {body}")]
    Unexpected {
        what: &'static str,
        path: String,
        status: u16,
        body: String,
    },
    #[error("a writer thread panicked")]
    Writer,
}

/// The figures after one round.
#[derive(Debug, Clone)]
pub struct Round {
    pub round: usize,
    pub secs: u64,
    /// Payload bytes acknowledged so far (appends and snapshot bodies).
    pub written: u64,
    /// What readers can still get: retained ranges and snapshot bodies of live streams.
    pub live: u64,
    pub bucket: BucketSample,
    pub nodes: Vec<NodeSample>,
    pub faults: String,
}

#[derive(Debug)]
pub struct Report {
    pub rounds: Vec<Round>,
    pub streams: usize,
    pub verified_bytes: u64,
    pub mismatches: Vec<String>,
    pub purged_checked: usize,
    pub refused_retention: u64,
    pub resent: usize,
}

impl Report {
    /// The largest one stream's replicated state any voter reported in any round.
    pub fn state_max(&self) -> u64 {
        self.rounds
            .iter()
            .flat_map(|r| r.nodes.iter().map(|n| n.state_max))
            .max()
            .unwrap_or(0)
    }
}

enum Op {
    Append {
        slot: usize,
        seed: u64,
        len: u64,
    },
    /// A snapshot at the tail, and retention moved to it when `retain` (a checkpoint, as the
    /// SQLite owner makes them).
    Snapshot {
        slot: usize,
        seed: u64,
        len: u64,
        retain: bool,
    },
    Retain {
        slot: usize,
        pick: u64,
    },
}

fn unexpected(what: &'static str, path: &str, a: &Answer) -> SoakError {
    SoakError::Unexpected {
        what,
        path: path.to_owned(),
        status: a.0,
        body: String::from_utf8_lossy(&a.2).chars().take(300).collect(),
    }
}

fn offset(o: u64) -> String {
    format!("{o:020}")
}

fn create(client: &Client, m: &StreamModel) -> Result<(), SoakError> {
    let a = client.send("PUT", &m.path(), &[OCTET], b"")?;
    match a.0 {
        200 | 201 => Ok(()),
        _ => Err(unexpected("create", &m.path(), &a)),
    }
}

/// Runs `op` on its stream; `Ok(false)` for a retention move the stream refused.
fn apply(client: &Client, m: &mut StreamModel, op: &Op) -> Result<bool, SoakError> {
    let path = m.path();
    match *op {
        Op::Append { seed, len, .. } => {
            let body = Piece {
                start: 0,
                seed,
                len,
            }
            .bytes();
            let (id, seq) = (m.producer(), m.next_seq.to_string());
            let headers = [
                OCTET,
                ("producer-id", id.as_str()),
                ("producer-epoch", "0"),
                ("producer-seq", seq.as_str()),
            ];
            let a = client.send("POST", &path, &headers, &body)?;
            // 204: a duplicate of an attempt whose answer was lost, which applied.
            if a.0 != 200 && a.0 != 204 {
                return Err(unexpected("append", &path, &a));
            }
            m.appended(seed, len);
        }
        Op::Snapshot {
            seed, len, retain, ..
        } => {
            let at = m.tail;
            if m.snapshot.is_some_and(|(o, _)| o == at) {
                // One snapshot an offset: a different body there is refused (409).
                return Ok(true);
            }
            let body = Piece {
                start: 0,
                seed,
                len,
            }
            .bytes();
            let a = client.send(
                "PUT",
                &format!("{path}/snapshot/{}", offset(at)),
                &[OCTET],
                &body,
            )?;
            if a.0 != 204 {
                return Err(unexpected("snapshot", &path, &a));
            }
            m.snapshot = Some((
                at,
                Piece {
                    start: 0,
                    seed,
                    len,
                },
            ));
            if retain && at > m.retained {
                let a =
                    client.send("PUT", &format!("{path}/retention/{}", offset(at)), &[], b"")?;
                if a.0 != 204 {
                    return Err(unexpected("retention", &path, &a));
                }
                m.retained_to(at);
            }
        }
        Op::Retain { pick, .. } => {
            let Some(to) = m.boundary(pick) else {
                return Ok(true);
            };
            let a = client.send("PUT", &format!("{path}/retention/{}", offset(to)), &[], b"")?;
            match a.0 {
                204 => m.retained_to(to),
                // Not a message boundary, say: counted, nothing changes.
                400..=499 => return Ok(false),
                _ => return Err(unexpected("retention", &path, &a)),
            }
        }
    }
    Ok(true)
}

fn slot_of(op: &Op) -> usize {
    match *op {
        Op::Append { slot, .. } | Op::Snapshot { slot, .. } | Op::Retain { slot, .. } => slot,
    }
}

/// The round's writes, in a random order, each tagged with its stream slot.
fn plan(spec: &Spec, rng: &mut StdRng) -> Vec<Op> {
    let mut ops = Vec::new();
    let slot = |rng: &mut StdRng| rng.random_range(0..spec.streams);
    // The busy streams: half the small appends, every snapshot and retention move, so their
    // histories grow long while the rest stay thin, as in a real tenant mix.
    let busy = |rng: &mut StdRng| rng.random_range(0..spec.busy.clamp(1, spec.streams));
    for i in 0..spec.small_appends {
        let len = rng.random_range(1..=spec.small_max as u64);
        let slot = if i % 2 == 0 { busy(rng) } else { slot(rng) };
        ops.push(Op::Append {
            slot,
            seed: rng.random(),
            len,
        });
    }
    for _ in 0..spec.large_appends {
        let len = rng.random_range(MIB..=spec.large_max as u64);
        ops.push(Op::Append {
            slot: slot(rng),
            seed: rng.random(),
            len,
        });
    }
    for _ in 0..spec.snapshots {
        let len = rng.random_range(MIB..=spec.snapshot_max as u64);
        ops.push(Op::Snapshot {
            slot: busy(rng),
            seed: rng.random(),
            len,
            retain: rng.random_bool(0.5),
        });
    }
    for _ in 0..spec.retention_moves {
        ops.push(Op::Retain {
            slot: busy(rng),
            pick: rng.random(),
        });
    }
    // Shuffled: each lane then runs its streams' ops in this order.
    let mut keyed: Vec<(u64, Op)> = ops.into_iter().map(|o| (rng.random(), o)).collect();
    keyed.sort_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, o)| o).collect()
}

/// Runs `ops` on `writers` threads; a stream's ops all go to one thread, in order.
fn write_round(
    spec: &Spec,
    client: &Arc<Client>,
    models: &Arc<Vec<Mutex<StreamModel>>>,
    ops: Vec<Op>,
) -> std::thread::JoinHandle<Result<u64, SoakError>> {
    let writers = spec.writers.max(1);
    let mut lanes: Vec<Vec<Op>> = (0..writers).map(|_| Vec::new()).collect();
    for op in ops {
        lanes[slot_of(&op) % writers].push(op);
    }
    let client = client.clone();
    let models = models.clone();
    std::thread::spawn(move || {
        let handles: Vec<_> = lanes
            .into_iter()
            .map(|lane| {
                let client = client.clone();
                let models = models.clone();
                std::thread::spawn(move || -> Result<u64, SoakError> {
                    let mut refused = 0;
                    for op in &lane {
                        let mut m = models[slot_of(op)]
                            .lock()
                            .unwrap_or_else(|e| e.into_inner());
                        if !apply(&client, &mut m, op)? {
                            refused += 1;
                        }
                    }
                    Ok(refused)
                })
            })
            .collect();
        let mut refused = 0;
        for h in handles {
            refused += h.join().map_err(|_| SoakError::Writer)??;
        }
        Ok(refused)
    })
}

fn lock(m: &Mutex<StreamModel>) -> std::sync::MutexGuard<'_, StreamModel> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the whole soak on `cluster`, printing a line per round to stderr.
pub fn run(
    spec: &Spec,
    cluster: &mut SoakCluster,
    rt: &tokio::runtime::Runtime,
) -> Result<Report, SoakError> {
    let started = Instant::now();
    let client = Arc::new(Client::new(cluster.bases()));
    let models: Arc<Vec<Mutex<StreamModel>>> = Arc::new(
        (0..spec.streams)
            .map(|i| {
                Mutex::new(StreamModel::new(
                    format!("soak-b{:02}", i % spec.buckets),
                    format!("s{i}"),
                ))
            })
            .collect(),
    );
    let lanes = spec.writers.max(1);
    std::thread::scope(|sc| {
        let created: Vec<_> = (0..lanes)
            .map(|lane| {
                let (client, models) = (&client, &models);
                sc.spawn(move || -> Result<(), SoakError> {
                    for m in models.iter().skip(lane).step_by(lanes) {
                        create(client, &lock(m))?;
                    }
                    Ok(())
                })
            })
            .collect();
        created
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| SoakError::Writer)?)
    })?;
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let mut rounds = Vec::new();
    let mut written = 0u64;
    let mut refused_retention = 0;
    let mut purged: Vec<String> = Vec::new();
    let mut purges = 0usize;
    for round in 1..=spec.rounds {
        let ops = plan(spec, &mut rng);
        written += ops
            .iter()
            .map(|o| match *o {
                Op::Append { len, .. } | Op::Snapshot { len, .. } => len,
                Op::Retain { .. } => 0,
            })
            .sum::<u64>();
        let writers = write_round(spec, &client, &models, ops);
        let mut faults = Vec::new();
        // Faults land while the round's writes are in flight.
        std::thread::sleep(Duration::from_millis(500));
        if spec.kill_every > 0 && round % spec.kill_every == 0 {
            let i = rng.random_range(0..3);
            cluster.kill(i, Duration::from_secs(1));
            faults.push(format!("SIGKILL n{}", i + 1));
        }
        if spec.restart_every > 0 && round % spec.restart_every == 0 {
            let i = rng.random_range(0..3);
            cluster.restart(i);
            faults.push(format!("restart n{}", i + 1));
        }
        refused_retention += writers.join().map_err(|_| SoakError::Writer)??;
        for _ in 0..spec.deletes {
            let mut m = lock(&models[rng.random_range(0..spec.streams)]);
            // A 404 is the answer only to a resend whose first attempt may have deleted it.
            let (a, resent) = client.send_tracked("DELETE", &m.path(), &[], b"")?;
            if a.0 != 204 && !(a.0 == 404 && resent) {
                return Err(unexpected("delete", &m.path(), &a));
            }
            m.recreated();
            create(&client, &m)?;
        }
        if spec.purge_every > 0 && round % spec.purge_every == 0 {
            let bucket = format!("soak-b{:02}", purges % spec.buckets);
            purges += 1;
            let (status, body) = cluster.purge(rng.random_range(0..3), &bucket);
            if status != 200 {
                return Err(SoakError::Unexpected {
                    what: "purge",
                    path: bucket,
                    status,
                    body,
                });
            }
            faults.push(format!("purge {bucket}"));
            // The bucket is fenced for good: its slots move to a bucket of a new name.
            for m in models.iter() {
                let mut m = lock(m);
                if m.bucket == bucket {
                    purged.push(m.path());
                    m.bucket = format!("{bucket}-p{purges}");
                    m.recreated();
                    create(&client, &m)?;
                }
            }
        }
        let live = models.iter().map(|m| lock(m).live_bytes()).sum();
        let r = Round {
            round,
            secs: started.elapsed().as_secs(),
            written,
            live,
            bucket: rt.block_on(cluster.sample_bucket()),
            nodes: cluster.sample_nodes(),
            faults: faults.join(", "),
        };
        eprintln!("{}", row(&r));
        rounds.push(r);
    }
    let (verified_bytes, mut mismatches) = verify(&client, &models)?;
    for p in &purged {
        let a = client.send("GET", &format!("{p}?offset={}", offset(0)), &[], b"")?;
        if a.0 != 404 {
            mismatches.push(format!("{p}: purged, yet answered {}", a.0));
        }
    }
    Ok(Report {
        rounds,
        streams: spec.streams,
        verified_bytes,
        mismatches,
        purged_checked: purged.len(),
        refused_retention,
        resent: client.resent.load(Ordering::Relaxed),
    })
}

/// Reads every live stream from its retained offset to its tail, and its snapshot, against
/// the model. Returns the bytes compared and what differed.
fn verify(client: &Client, models: &[Mutex<StreamModel>]) -> Result<(u64, Vec<String>), SoakError> {
    let mut bytes = 0;
    let mut bad = Vec::new();
    for m in models {
        let m = lock(m);
        let path = m.path();
        // The tail first: a byte the stream holds past what was acknowledged (an append
        // applied twice) shows here, not in the range read below.
        let head = client.send("HEAD", &path, &[], b"")?;
        let tail = header(&head, "stream-next-offset").and_then(|v| v.parse::<u64>().ok());
        if head.0 != 200 || tail != Some(m.tail) {
            bad.push(format!(
                "{path}: HEAD {} with tail {tail:?}, expected {}",
                head.0, m.tail
            ));
            continue;
        }
        let mut at = m.retained;
        while at < m.tail {
            let a = client.send("GET", &format!("{path}?offset={}", offset(at)), &[], b"")?;
            let next = header(&a, "stream-next-offset").and_then(|v| v.parse::<u64>().ok());
            if a.0 != 200 || next != Some(at + a.2.len() as u64) || a.2.is_empty() {
                bad.push(format!(
                    "{path} at {at}: {} with {} bytes, next {next:?}",
                    a.0,
                    a.2.len()
                ));
                break;
            }
            if a.2 != m.expected(at, a.2.len() as u64) {
                bad.push(format!(
                    "{path}: bytes differ in [{at}, {})",
                    at + a.2.len() as u64
                ));
                break;
            }
            bytes += a.2.len() as u64;
            at += a.2.len() as u64;
        }
        if let Some((o, p)) = m.snapshot {
            let a = client.send("GET", &format!("{path}/snapshot/{}", offset(o)), &[], b"")?;
            if a.0 != 200 || a.2 != p.bytes() {
                bad.push(format!(
                    "{path}: snapshot at {o} answered {} ({} bytes)",
                    a.0,
                    a.2.len()
                ));
            } else {
                bytes += p.len;
            }
        }
    }
    Ok((bytes, bad))
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / MIB as f64)
}

/// The report's header row, in Markdown.
pub fn header_rows() -> String {
    "| round | s | written MiB | live MiB | S3 objects | S3 MiB | S3 / live | Raft snapshot max KiB | state max B | state p99 B | RSS MiB n1 / n2 / n3 | orphans found / deleted | faults |\n\
     | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        .to_owned()
}

/// One round as a Markdown row.
pub fn row(r: &Round) -> String {
    let most = |f: fn(&NodeSample) -> u64| r.nodes.iter().map(f).max().unwrap_or(0);
    let rss: Vec<String> = r
        .nodes
        .iter()
        .map(|n| format!("{:.0}", n.rss_bytes as f64 / MIB as f64))
        .collect();
    let found: u64 = r.nodes.iter().map(|n| n.orphans_found).sum();
    let deleted: u64 = r.nodes.iter().map(|n| n.orphans_deleted).sum();
    format!(
        "| {} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {found} / {deleted} | {} |",
        r.round,
        r.secs,
        mib(r.written),
        mib(r.live),
        r.bucket.objects,
        mib(r.bucket.bytes),
        r.bucket.bytes as f64 / r.live.max(1) as f64,
        r.bucket.raft_snapshot_max / 1024,
        most(|n| n.state_max),
        most(|n| n.state_p99),
        rss.join(" / "),
        r.faults,
    )
}
