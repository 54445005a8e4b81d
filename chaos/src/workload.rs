//! The clients of a run, one thread each, recording every operation into the history:
//! exactly-once producers (retrying one sequence number until it is acknowledged), plain
//! appenders, a catch-up reader pinned to every node, a `consistency=leader` reader, a
//! long-poll tail through the gateway and an SSE tail on the nodes.

use std::io::BufRead;
use std::io::BufReader;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::client;
use crate::client::Answer;
use crate::history::Append;
use crate::history::Outcome;
use crate::history::ProducerSeq;
use crate::history::Read;
use crate::history::ReadKind;
use crate::history::Refused;

/// The stream every client works on (a text stream, so SSE carries the records as they are).
pub const CONTENT_TYPE: &str = "text/plain";
/// How long one request may take before the client counts it as unanswered.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a producer retries one sequence number before it gives up on it.
const PRODUCER_PATIENCE: Duration = Duration::from_secs(20);

/// What every client shares.
#[derive(Clone)]
pub struct Setup {
    /// The nodes' base URLs.
    pub nodes: Vec<String>,
    /// The gateway's base URL.
    pub gateway: String,
    /// The stream's path (`/bucket/stream`).
    pub path: String,
    pub start: Instant,
    pub stop: Arc<AtomicBool>,
    pub seed: u64,
    /// The highest `Stream-Next-Offset` any read has answered: bytes up to it exist.
    pub seen: Arc<AtomicU64>,
}

impl Setup {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Every base a writer may use: the nodes and the gateway.
    fn targets(&self) -> Vec<String> {
        let mut t = self.nodes.clone();
        t.push(self.gateway.clone());
        t
    }

    fn rng(&self, salt: u64) -> StdRng {
        StdRng::seed_from_u64(self.seed.wrapping_mul(1_000_003).wrapping_add(salt))
    }
}

/// What one client recorded.
#[derive(Default)]
pub struct Recorded {
    pub appends: Vec<Append>,
    pub reads: Vec<Read>,
    pub refused: Vec<Refused>,
    /// Answers that were neither success nor an expected refusal, by status, for the report.
    pub odd: Vec<String>,
}

impl Recorded {
    /// A read answer that is not a read nor a refusal the reader expects.
    fn odd_read(&mut self, reader: &str, a: &Answer) {
        self.odd.push(format!("read {reader}: {}", describe(a)));
    }
}

/// Starts every client; each runs until `setup.stop` is set. Join the handles for the history.
pub fn spawn_all(setup: &Setup) -> Vec<std::thread::JoinHandle<Recorded>> {
    let mut handles = Vec::new();
    for k in 0..2 {
        let s = setup.clone();
        handles.push(std::thread::spawn(move || producer(&s, k)));
    }
    for k in 0..2 {
        let s = setup.clone();
        handles.push(std::thread::spawn(move || appender(&s, k)));
    }
    for i in 0..setup.nodes.len() {
        let s = setup.clone();
        handles.push(std::thread::spawn(move || catchup_reader(&s, i)));
    }
    let s = setup.clone();
    handles.push(std::thread::spawn(move || leader_reader(&s)));
    let s = setup.clone();
    handles.push(std::thread::spawn(move || long_poll_tail(&s)));
    let s = setup.clone();
    handles.push(std::thread::spawn(move || sse_tail(&s)));
    handles
}

fn pause(rng: &mut StdRng) {
    std::thread::sleep(Duration::from_millis(rng.random_range(5..25)));
}

/// An exactly-once producer: every sequence number is retried, with the same token, until it
/// is acknowledged; one it gives up on ends the epoch (the next starts at sequence 0).
fn producer(s: &Setup, k: u64) -> Recorded {
    let mut out = Recorded::default();
    let agent = client::agent(REQUEST_TIMEOUT);
    let targets = s.targets();
    let mut rng = s.rng(10 + k);
    let id = format!("p{k}");
    let (mut epoch, mut seq, mut n) = (0u64, 0u64, 0u64);
    let mut target = rng.random_range(0..targets.len());
    while !s.stopped() {
        let token = format!("{id}.{n}");
        let body = format!("{token};");
        let invoke = s.now();
        let began = Instant::now();
        let mut attempts = 0;
        let (epoch_s, seq_s) = (epoch.to_string(), seq.to_string());
        let headers = [
            ("content-type", CONTENT_TYPE),
            ("producer-id", id.as_str()),
            ("producer-epoch", epoch_s.as_str()),
            ("producer-seq", seq_s.as_str()),
        ];
        let outcome = loop {
            attempts += 1;
            let url = format!("{}{}", targets[target], s.path);
            match client::send(&agent, "POST", &url, &headers, body.as_bytes()) {
                Some(a) if a.status == 200 || a.status == 204 => break Outcome::Acked,
                Some(a) if a.status < 500 && a.status != 408 && a.status != 429 => {
                    out.odd.push(format!("producer {token}: {}", describe(&a)));
                    break Outcome::Unknown;
                }
                _ => {}
            }
            // A stop ends the run: what was sent may or may not be in.
            if began.elapsed() > PRODUCER_PATIENCE || s.stopped() {
                break Outcome::Unknown;
            }
            target = (target + 1) % targets.len();
            std::thread::sleep(Duration::from_millis(100));
        };
        out.appends.push(Append {
            client: id.clone(),
            token,
            invoke_ns: invoke,
            complete_ns: s.now(),
            outcome,
            producer: Some(ProducerSeq {
                id: id.clone(),
                epoch,
                seq,
            }),
            attempts,
        });
        n += 1;
        if outcome == Outcome::Acked {
            seq += 1;
        } else {
            epoch += 1;
            seq = 0;
        }
        pause(&mut rng);
    }
    out
}

/// A plain appender: one request per token, never resent; a marked refusal is recorded as
/// not applied, anything else unanswered as unknown.
fn appender(s: &Setup, k: u64) -> Recorded {
    let mut out = Recorded::default();
    let agent = client::agent(REQUEST_TIMEOUT);
    let targets = s.targets();
    let mut rng = s.rng(20 + k);
    let id = format!("a{k}");
    let mut n = 0u64;
    while !s.stopped() {
        let token = format!("{id}.{n}");
        let body = format!("{token};");
        let target = &targets[rng.random_range(0..targets.len())];
        let invoke = s.now();
        let answer = client::send(
            &agent,
            "POST",
            &format!("{target}{}", s.path),
            &[("content-type", CONTENT_TYPE)],
            body.as_bytes(),
        );
        let outcome = match &answer {
            Some(a) if (200..300).contains(&a.status) => Outcome::Acked,
            Some(a) if a.not_applied() => Outcome::NotApplied,
            _ => Outcome::Unknown,
        };
        if let Some(a) = answer
            .as_ref()
            .filter(|a| a.status < 500 && a.status >= 300)
        {
            out.odd.push(format!("append {token}: {}", describe(a)));
        }
        out.appends.push(Append {
            client: id.clone(),
            token,
            invoke_ns: invoke,
            complete_ns: s.now(),
            outcome,
            producer: None,
            attempts: 1,
        });
        n += 1;
        pause(&mut rng);
    }
    out
}

fn describe(a: &Answer) -> String {
    format!(
        "{} from {} ({})",
        a.status,
        a.url,
        String::from_utf8_lossy(&a.body)
            .chars()
            .take(160)
            .collect::<String>()
    )
}

/// Records a `200` or `204` read answer; `None` for any other.
fn record(
    s: &Setup,
    reader: &str,
    kind: ReadKind,
    from: u64,
    invoke: u64,
    a: &Answer,
) -> Option<Read> {
    if a.status != 200 && a.status != 204 {
        return None;
    }
    let next = a.next_offset()?;
    s.seen.fetch_max(next, Ordering::SeqCst);
    Some(Read {
        reader: reader.to_owned(),
        kind,
        target: a.url.clone(),
        invoke_ns: invoke,
        complete_ns: s.now(),
        from,
        data: String::from_utf8_lossy(&a.body).into_owned(),
        next,
        up_to_date: a.up_to_date(),
    })
}

/// A catch-up reader pinned to node `i`: reads on from its cursor, now and then starts again
/// from an earlier offset, so every node's copy is compared with the final log, and now and
/// then jumps to the furthest offset any read has shown, which may be past this node's tail.
fn catchup_reader(s: &Setup, i: usize) -> Recorded {
    let mut out = Recorded::default();
    let agent = client::agent(REQUEST_TIMEOUT);
    let mut rng = s.rng(30 + i as u64);
    let name = format!("r{}", i + 1);
    let mut cursor = 0u64;
    while !s.stopped() {
        if rng.random_range(0..8) == 0 {
            cursor = s.seen.load(Ordering::SeqCst);
        }
        let invoke = s.now();
        let url = format!("{}{}?offset={}", s.nodes[i], s.path, client::offset(cursor));
        if let Some(a) = client::send(&agent, "GET", &url, &[], b"") {
            match record(s, &name, ReadKind::Catchup, cursor, invoke, &a) {
                Some(r) => {
                    let caught_up = r.data.is_empty() || r.up_to_date;
                    cursor = r.next;
                    out.reads.push(r);
                    if caught_up && rng.random_range(0..4) == 0 {
                        cursor = rng.random_range(0..=cursor);
                    }
                }
                None if a.status == 416 => out.refused.push(Refused {
                    reader: name.clone(),
                    target: a.url.clone(),
                    invoke_ns: invoke,
                    from: cursor,
                }),
                None if a.status != 503 => out.odd_read(&name, &a),
                None => {}
            }
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(10..40)));
    }
    out
}

/// Reads the whole stream with `consistency=leader`, through any node or the gateway.
fn leader_reader(s: &Setup) -> Recorded {
    let mut out = Recorded::default();
    let agent = client::agent(REQUEST_TIMEOUT);
    let targets = s.targets();
    let mut rng = s.rng(40);
    while !s.stopped() {
        let target = &targets[rng.random_range(0..targets.len())];
        let invoke = s.now();
        let url = format!(
            "{target}{}?consistency=leader&offset={}",
            s.path,
            client::offset(0)
        );
        if let Some(a) = client::send(&agent, "GET", &url, &[], b"") {
            match record(s, "l0", ReadKind::Leader, 0, invoke, &a) {
                Some(r) => out.reads.push(r),
                None if a.status != 503 => out.odd_read("l0", &a),
                None => {}
            }
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(50..150)));
    }
    out
}

/// A long-poll tail through the gateway, from offset 0 on, never skipping.
fn long_poll_tail(s: &Setup) -> Recorded {
    let mut out = Recorded::default();
    let agent = client::agent(Duration::from_secs(8));
    let mut cursor = 0u64;
    while !s.stopped() {
        let invoke = s.now();
        let url = format!(
            "{}{}?live=long-poll&offset={}&timeout_ms=2000",
            s.gateway,
            s.path,
            client::offset(cursor)
        );
        match client::send(&agent, "GET", &url, &[], b"") {
            Some(a) => match record(s, "lp", ReadKind::LongPoll, cursor, invoke, &a) {
                Some(r) => {
                    cursor = r.next;
                    out.reads.push(r);
                }
                None => {
                    if a.status != 503 && a.status != 504 {
                        out.odd_read("lp", &a);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            },
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    out
}

/// An SSE tail on the nodes (a follower sends it to the leader): each data event and the
/// control event after it are one read; a dropped connection resumes from the last control
/// event's offset on the next node.
fn sse_tail(s: &Setup) -> Recorded {
    let mut out = Recorded::default();
    let agent = client::agent(Duration::from_secs(10));
    let mut cursor = 0u64;
    let mut node = 0usize;
    while !s.stopped() {
        let mut url = format!(
            "{}{}?live=sse&offset={}",
            s.nodes[node % s.nodes.len()],
            s.path,
            client::offset(cursor)
        );
        node += 1;
        // Follow redirects by hand, keeping the streaming body of the last answer.
        let mut resp = None;
        for _ in 0..4 {
            let Ok(r) = agent.get(&url).call() else { break };
            if r.status() == 307 {
                match r.headers().get("location").and_then(|v| v.to_str().ok()) {
                    Some(l) => url = l.to_owned(),
                    None => break,
                }
                continue;
            }
            resp = Some(r);
            break;
        }
        let Some(resp) = resp.filter(|r| r.status() == 200) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let mut lines = BufReader::new(resp.into_body().into_reader()).lines();
        let (mut event, mut data, mut pending): (String, Vec<String>, Option<(u64, String)>) =
            (String::new(), Vec::new(), None);
        let mut invoke = s.now();
        while !s.stopped() {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
            } else if line.is_empty() {
                let text = data.join("\n");
                data.clear();
                match event.as_str() {
                    "data" => {
                        let mut held = pending.take().map(|p| p.1).unwrap_or_default();
                        held.push_str(&text);
                        pending = Some((invoke, held));
                    }
                    "control" => {
                        let next = serde_json::from_str::<serde_json::Value>(&text)
                            .ok()
                            .and_then(|v| match &v["streamNextOffset"] {
                                serde_json::Value::String(x) => x.parse().ok(),
                                n => n.as_u64(),
                            });
                        let Some(next) = next else {
                            out.odd
                                .push(format!("sse control without an offset: {text}"));
                            break;
                        };
                        let (inv, body) = pending.take().unwrap_or((invoke, String::new()));
                        out.reads.push(Read {
                            reader: "sse".into(),
                            kind: ReadKind::Sse,
                            target: url.clone(),
                            invoke_ns: inv,
                            complete_ns: s.now(),
                            from: cursor,
                            data: body,
                            next,
                            up_to_date: false,
                        });
                        cursor = next;
                        invoke = s.now();
                    }
                    _ => {}
                }
                event.clear();
            }
        }
    }
    out
}
