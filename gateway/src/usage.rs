//! Usage accounting (`--usage-log`): requests, ingress and egress bytes, and optionally
//! write units (`--usage-chunk-bytes`), summed per `(bucket, principal, action class)` and
//! appended to a JSONL file as one sequence-numbered batch every `--usage-flush-secs`.
//!
//! Requests never wait for the sink. Counting only takes a short lock on the pending sums;
//! the file is written by a task of its own. A batch the sink cannot take stays queued and
//! the next interval's sums merge into it, so a failing sink delays reporting and loses no
//! count; the batch goes out whole, under the next sequence number, once the sink recovers.
//! The line layout is described in `docs/gateway.md` ("Usage log", version 1).

use std::collections::HashMap;
use std::io::BufRead;
use std::io::Read;
use std::io::Seek;
use std::io::Write;
use std::num::NonZeroU64;
use std::path::Path;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::task::Context;
use std::task::Poll;
use std::time::Duration;
use std::time::SystemTime;

use bytes::Bytes;
use http::Method;
use hyper::body::Body;
use hyper::body::Frame;
use hyper::body::SizeHint;
use serde::Serialize;

use crate::admission::LiveRead;
use crate::auth::Principal;
use crate::reply::BoxError;
use crate::reply::GatewayBody;

/// The version of the usage log's line layout.
pub const USAGE_LOG_VERSION: u32 = 1;

/// What a request does, as usage counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    /// `GET` and `HEAD`: reads, heads, tails, snapshot reads.
    Read,
    /// `POST`: appends (the write units of `--usage-chunk-bytes` count these).
    Append,
    /// Every other method: creates, deletes, snapshot publishes, retention, bucket admin.
    Write,
}

impl ActionClass {
    pub fn of(method: &Method) -> ActionClass {
        if method == Method::GET || method == Method::HEAD {
            ActionClass::Read
        } else if method == Method::POST {
            ActionClass::Append
        } else {
            ActionClass::Write
        }
    }
}

/// Who and what a count belongs to. `principal` is `None` for anonymous callers (public
/// reads, or a gateway without access control).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UsageKey {
    pub bucket: String,
    pub principal: Option<Principal>,
    pub class: ActionClass,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageCounts {
    pub requests: u64,
    pub ingress_bytes: u64,
    pub egress_bytes: u64,
    pub chunks: u64,
}

impl UsageCounts {
    fn merge(&mut self, o: UsageCounts) {
        self.requests += o.requests;
        self.ingress_bytes += o.ingress_bytes;
        self.egress_bytes += o.egress_bytes;
        self.chunks += o.chunks;
    }
}

/// `--usage-*`, checked.
#[derive(Debug, Clone)]
pub struct UsageConfig {
    pub path: PathBuf,
    pub flush_every: Duration,
    /// The write unit of `chunks`; `None`: no `chunks` counter.
    pub chunk_bytes: Option<NonZeroU64>,
}

/// One batch as the log carries it.
#[derive(Debug, Serialize)]
struct BatchLine<'a> {
    v: u32,
    seq: u64,
    /// Milliseconds since the Unix epoch: the first and last interval the batch covers.
    from_ms: u64,
    to_ms: u64,
    records: Vec<RecordLine<'a>>,
}

#[derive(Debug, Serialize)]
struct RecordLine<'a> {
    bucket: &'a str,
    principal: Option<&'a Principal>,
    class: ActionClass,
    requests: u64,
    ingress_bytes: u64,
    egress_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunks: Option<u64>,
}

/// The batch waiting for the sink, and where the log's numbering stands.
#[derive(Debug, Default)]
struct Unsent {
    sums: HashMap<UsageKey, UsageCounts>,
    from_ms: u64,
    next_seq: u64,
}

/// Sink counters, shown on the gateway's metrics.
#[derive(Debug, Default)]
pub struct UsageStats {
    pub batches_written: AtomicU64,
    pub sink_failures: AtomicU64,
}

/// The usage ledger of one gateway.
#[derive(Debug)]
pub struct Usage {
    config: UsageConfig,
    pending: Mutex<HashMap<UsageKey, UsageCounts>>,
    unsent: tokio::sync::Mutex<Unsent>,
    pub stats: UsageStats,
}

impl Usage {
    /// A ledger whose numbering continues the log at `config.path`, if there is one.
    pub fn new(config: UsageConfig) -> Usage {
        let next_seq = last_seq(&config.path).map_or(1, |s| s + 1);
        Usage {
            config,
            pending: Mutex::new(HashMap::new()),
            unsent: tokio::sync::Mutex::new(Unsent {
                next_seq,
                ..Unsent::default()
            }),
            stats: UsageStats::default(),
        }
    }

    pub fn config(&self) -> &UsageConfig {
        &self.config
    }

    /// Counts one forwarded request and its body.
    pub fn record_request(&self, key: &UsageKey, ingress: u64) {
        let chunks = match (self.config.chunk_bytes, key.class) {
            (Some(unit), ActionClass::Append) => ingress.div_ceil(unit.get()).max(1),
            _ => 0,
        };
        self.add(
            key,
            UsageCounts {
                requests: 1,
                ingress_bytes: ingress,
                egress_bytes: 0,
                chunks,
            },
        );
    }

    fn add(&self, key: &UsageKey, counts: UsageCounts) {
        let mut p = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match p.get_mut(key) {
            Some(c) => c.merge(counts),
            None => {
                p.insert(key.clone(), counts);
            }
        }
    }

    /// Writes what has been counted as one batch (merged into a queued one), if anything.
    /// `Ok(false)`: nothing to write. A failed write keeps everything for the next try.
    pub async fn flush(&self) -> std::io::Result<bool> {
        let now_ms = epoch_ms(SystemTime::now());
        let fresh = std::mem::take(
            &mut *self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut unsent = self.unsent.lock().await;
        if unsent.sums.is_empty() && !fresh.is_empty() {
            unsent.from_ms = now_ms.saturating_sub(
                u64::try_from(self.config.flush_every.as_millis()).unwrap_or(u64::MAX),
            );
        }
        for (k, c) in fresh {
            unsent.sums.entry(k).or_default().merge(c);
        }
        if unsent.sums.is_empty() {
            return Ok(false);
        }
        let line = render(&unsent, now_ms, self.config.chunk_bytes.is_some())?;
        let path = self.config.path.clone();
        let written = tokio::task::spawn_blocking(move || append_line(&path, &line))
            .await
            .map_err(std::io::Error::other)?;
        match written {
            Ok(()) => {
                unsent.sums.clear();
                unsent.next_seq += 1;
                self.stats.batches_written.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                self.stats.sink_failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Flushes every `--usage-flush-secs` until `stop` resolves, then once more.
    pub async fn run(self: Arc<Usage>, stop: impl std::future::Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut tick = tokio::time::interval(self.config.flush_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = &mut stop => break,
            }
            if let Err(e) = self.flush().await {
                tracing::warn!(path = %self.config.path.display(), error = %e,
                    "cannot write the usage log; the batch stays queued");
            }
        }
        if let Err(e) = self.flush().await {
            tracing::error!(path = %self.config.path.display(), error = %e,
                "cannot write the last usage batch at shutdown");
        }
    }
}

/// One line of the log, without its newline.
fn render(unsent: &Unsent, to_ms: u64, chunks: bool) -> std::io::Result<String> {
    let mut records: Vec<RecordLine<'_>> = unsent
        .sums
        .iter()
        .map(|(k, c)| RecordLine {
            bucket: &k.bucket,
            principal: k.principal.as_ref(),
            class: k.class,
            requests: c.requests,
            ingress_bytes: c.ingress_bytes,
            egress_bytes: c.egress_bytes,
            chunks: chunks.then_some(c.chunks),
        })
        .collect();
    // A stable order makes batches easy to compare and diff.
    records.sort_by(|a, b| {
        (
            a.bucket,
            a.principal.map(|p| (&p.issuer, &p.subject)),
            a.class as u8,
        )
            .cmp(&(
                b.bucket,
                b.principal.map(|p| (&p.issuer, &p.subject)),
                b.class as u8,
            ))
    });
    serde_json::to_string(&BatchLine {
        v: USAGE_LOG_VERSION,
        seq: unsent.next_seq,
        from_ms: unsent.from_ms,
        to_ms,
        records,
    })
    .map_err(std::io::Error::other)
}

/// Appends one line and syncs it: a batch counts as reported only once it is on disk. The
/// file is opened for each batch, so a log rotated by renaming it is picked up at once.
///
/// A write or sync that fails takes the file back to its length before it, so a batch written
/// again later is never doubled or glued to a torn copy of itself.
fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    let start = f.metadata()?.len();
    let mut buf = Vec::with_capacity(line.len() + 2);
    // A file left without its final newline (a torn write we could not take back) still gets
    // this batch on a line of its own.
    if start > 0 && !ends_with_newline(&mut f, start)? {
        buf.push(b'\n');
    }
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    let written = f.write_all(&buf).and_then(|()| f.sync_data());
    if let Err(e) = written {
        let _ = f.set_len(start);
        return Err(e);
    }
    Ok(())
}

fn ends_with_newline(f: &mut std::fs::File, len: u64) -> std::io::Result<bool> {
    f.seek(std::io::SeekFrom::Start(len - 1))?;
    let mut last = [0u8; 1];
    f.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// The sequence number of the log's last batch, to continue the numbering after a restart.
fn last_seq(path: &Path) -> Option<u64> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    // Batches are small; the last one almost always sits in the final MiB.
    let start = len.saturating_sub(1 << 20);
    f.seek(std::io::SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    f.take(1 << 20).read_to_end(&mut tail).ok()?;
    let from_tail = tail
        .split(|&b| b == b'\n')
        .rev()
        .find_map(|l| serde_json::from_slice::<SeqOnly>(l).ok())
        .map(|s| s.seq);
    if from_tail.is_some() || start == 0 {
        return from_tail;
    }
    let f = std::fs::File::open(path).ok()?;
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<SeqOnly>(&l).ok())
        .map(|s| s.seq)
        .last()
}

#[derive(serde::Deserialize)]
struct SeqOnly {
    seq: u64,
}

fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Counts a response's body as egress while it streams (SSE included), and holds a live
/// read's share until the body ends or the client goes.
pub struct Metered {
    inner: GatewayBody,
    meter: Option<(Arc<Usage>, UsageKey)>,
    _live: Option<LiveRead>,
}

impl Metered {
    pub fn wrap(
        inner: GatewayBody,
        meter: Option<(Arc<Usage>, UsageKey)>,
        live: Option<LiveRead>,
    ) -> GatewayBody {
        if meter.is_none() && live.is_none() {
            return inner;
        }
        http_body_util::BodyExt::boxed_unsync(Metered {
            inner,
            meter,
            _live: live,
        })
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
            && let Some((usage, key)) = &self.meter
        {
            usage.add(
                key,
                UsageCounts {
                    egress_bytes: data.len() as u64,
                    ..UsageCounts::default()
                },
            );
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ursula-usage-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn key(bucket: &str, class: ActionClass) -> UsageKey {
        UsageKey {
            bucket: bucket.into(),
            principal: Some(Principal {
                issuer: "https://i".into(),
                subject: "u".into(),
            }),
            class,
        }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect()
    }

    #[test]
    fn chunks_are_each_appends_units_rounded_up_and_never_below_one() {
        let u = Usage::new(UsageConfig {
            path: scratch("chunks").join("u.jsonl"),
            flush_every: Duration::from_secs(1),
            chunk_bytes: NonZeroU64::new(10 * 1024),
        });
        let k = key("b", ActionClass::Append);
        // The spec's example: 5 KiB + 25 KiB owe four units, 10 KiB + 20 KiB three.
        u.record_request(&k, 5 * 1024);
        u.record_request(&k, 25 * 1024);
        u.record_request(&k, 0);
        u.record_request(&key("b", ActionClass::Read), 0);
        let p = u.pending.lock().expect("lock");
        assert_eq!(p[&k].chunks, 5);
        assert_eq!(p[&k].requests, 3);
        assert_eq!(p[&key("b", ActionClass::Read)].chunks, 0);
    }

    #[tokio::test]
    async fn a_failing_sink_keeps_counts_queued_and_merges_them_into_the_next_batch() {
        let dir = scratch("fail");
        let path = dir.join("usage.jsonl");
        let cfg = UsageConfig {
            path: path.clone(),
            flush_every: Duration::from_secs(1),
            chunk_bytes: None,
        };
        let u = Usage::new(cfg.clone());
        let k = key("b", ActionClass::Append);
        u.record_request(&k, 100);
        // The directory does not exist: the sink fails.
        assert!(u.flush().await.is_err());
        u.record_request(&k, 50);
        assert!(u.flush().await.is_err());
        std::fs::create_dir_all(&dir).expect("dir");
        assert!(u.flush().await.expect("written"));
        assert!(
            !u.flush().await.expect("nothing new"),
            "an empty batch was written"
        );
        u.record_request(&k, 1);
        assert!(u.flush().await.expect("second batch"));
        let got = lines(&path);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["seq"], 1);
        assert_eq!(got[0]["v"], 1);
        assert_eq!(got[0]["records"][0]["requests"], 2);
        assert_eq!(got[0]["records"][0]["ingress_bytes"], 150);
        assert_eq!(got[1]["seq"], 2);
        // A torn line left by a crash does not swallow the next batch.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"v\":1,\"seq\":2,\"tor"))
            .expect("tear");
        u.record_request(&k, 1);
        assert!(u.flush().await.expect("after the tear"));
        let text = std::fs::read_to_string(&path).expect("log");
        assert!(
            text.lines()
                .last()
                .is_some_and(|l| l.starts_with("{\"v\":1,\"seq\":3")),
            "{text}"
        );
        let keep: Vec<&str> = text.lines().filter(|l| !l.ends_with("\"tor")).collect();
        std::fs::write(&path, keep.join("\n") + "\n").expect("untear");
        // A restart continues the numbering.
        let again = Usage::new(cfg);
        again.record_request(&k, 1);
        assert!(again.flush().await.expect("fourth"));
        assert_eq!(lines(&path)[3]["seq"], 4);
        assert_eq!(u.stats.sink_failures.load(Ordering::Relaxed), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_metered_body_counts_what_streams_and_gives_the_live_share_back() {
        use http_body_util::BodyExt;
        let u = Arc::new(Usage::new(UsageConfig {
            path: scratch("meter").join("u.jsonl"),
            flush_every: Duration::from_secs(1),
            chunk_bytes: None,
        }));
        let k = key("b", ActionClass::Read);
        let body = Metered::wrap(
            crate::reply::body("hello world"),
            Some((u.clone(), k.clone())),
            None,
        );
        let got = body.collect().await.expect("body").to_bytes();
        assert_eq!(&got[..], b"hello world");
        assert_eq!(u.pending.lock().expect("lock")[&k].egress_bytes, 11);
    }
}
