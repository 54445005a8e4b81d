//! SSE fan-out: `subscribers` connections follow one stream with `?offset=now&live=sse`, one
//! writer appends at a fixed rate, and every append carries the time it was sent. Each
//! subscriber records, per received append, the time from just before the POST was written to
//! the moment its event was parsed.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use base64::Engine;
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::BoxError;
use crate::http::Chunked;
use crate::http::Conn;
use crate::http::HttpError;
use crate::http::Target;
use crate::load::REQUEST_LIMIT;
use crate::load::histogram;

/// An append's payload: the send time in µs since the run's base instant, as 20 ASCII digits,
/// then a newline. Several appends delivered in one event are several such records.
const RECORD_LEN: usize = 21;
/// At most this many subscribers connect at the same time (the listen backlog is finite).
const CONNECT_PARALLELISM: usize = 64;

#[derive(Debug, Clone)]
pub struct FanOut {
    pub path: String,
    pub subscribers: usize,
    pub rate_per_s: f64,
    pub duration: Duration,
    /// How long subscribers keep reading after the last append.
    pub grace: Duration,
}

#[derive(Debug)]
pub struct FanOutOutcome {
    pub hist: Histogram<u64>,
    pub sent: u64,
    pub delivered: u64,
    pub seconds: f64,
    pub failed_subscribers: usize,
    pub first_failure: Option<String>,
}

fn micros_since(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_micros()).unwrap_or(u64::MAX)
}

pub async fn fan_out(target: &Target, spec: &FanOut) -> Result<FanOutOutcome, BoxError> {
    let base = Instant::now();
    let ready = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(CONNECT_PARALLELISM));
    // Subscribers stop at `stop_at`, fixed once the writer is done; until then a far deadline.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(None::<Instant>);
    let get = Arc::new(target.request("GET", &format!("{}?offset=now&live=sse", spec.path), None));
    let mut set = JoinSet::new();
    for _ in 0..spec.subscribers {
        let (target, get, ready, gate, stop) = (
            target.clone(),
            Arc::clone(&get),
            Arc::clone(&ready),
            Arc::clone(&gate),
            stop_rx.clone(),
        );
        set.spawn(async move { subscriber(target, &get, ready, gate, stop, base).await });
    }

    // Wait until every subscriber has its response head (bounded).
    let connect_deadline = Instant::now() + Duration::from_secs(60);
    while ready.load(Ordering::Relaxed) < spec.subscribers {
        if Instant::now() >= connect_deadline {
            return Err(format!(
                "only {} of {} SSE subscribers connected within 60 s",
                ready.load(Ordering::Relaxed),
                spec.subscribers
            )
            .into());
        }
        if let Some(joined) = set.try_join_next() {
            let why = match joined {
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(_)) => "ended early".to_owned(),
                Err(e) => e.to_string(),
            };
            return Err(format!("an SSE subscriber failed while connecting: {why}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A moment for the servers to register every reader (headers may precede registration).
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut writer = Conn::connect(target).await?;
    let period = Duration::from_secs_f64(1.0 / spec.rate_per_s.max(0.1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut sent = 0u64;
    while started.elapsed() < spec.duration {
        tick.tick().await;
        let mut body = format!("{:020}\n", micros_since(base)).into_bytes();
        body.truncate(RECORD_LEN);
        let req = target.request("POST", &spec.path, Some(&body));
        let (status, _) = writer.roundtrip_within(&req, REQUEST_LIMIT).await?;
        if !(200..300).contains(&status) {
            return Err(format!("SSE writer's append answered {status}").into());
        }
        sent += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(Some(Instant::now() + spec.grace));

    let mut out = FanOutOutcome {
        hist: histogram()?,
        sent,
        delivered: 0,
        seconds,
        failed_subscribers: 0,
        first_failure: None,
    };
    while let Some(joined) = set.join_next().await {
        match joined? {
            Ok(latencies) => {
                out.delivered += latencies.len() as u64;
                for ns in latencies {
                    out.hist.saturating_record(ns);
                }
            }
            Err(e) => {
                out.failed_subscribers += 1;
                out.first_failure.get_or_insert_with(|| e.to_string());
            }
        }
    }
    Ok(out)
}

async fn subscriber(
    target: Target,
    get: &[u8],
    ready: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
    mut stop: tokio::sync::watch::Receiver<Option<Instant>>,
    base: Instant,
) -> Result<Vec<u64>, HttpError> {
    let (mut conn, base64) = {
        let _permit = gate.acquire().await.map_err(|_| HttpError::Closed)?;
        let mut conn = tokio::time::timeout(REQUEST_LIMIT, Conn::connect(&target))
            .await
            .map_err(|_| HttpError::Timeout(REQUEST_LIMIT))??;
        conn.send(get).await?;
        let head = tokio::time::timeout(REQUEST_LIMIT, conn.read_head())
            .await
            .map_err(|_| HttpError::Timeout(REQUEST_LIMIT))??;
        if head.status != 200 || !head.chunked {
            return Err(HttpError::Parse(format!(
                "SSE answered {} (chunked: {})",
                head.status, head.chunked
            )));
        }
        ready.fetch_add(1, Ordering::Relaxed);
        (conn, head.base64)
    };
    let mut chunked = Chunked::default();
    let mut parser = EventParser::default();
    let mut text = Vec::with_capacity(4096);
    // Latencies in ns, made a histogram once the run is over: a histogram of this range per
    // subscriber is large, and recording into a thousand of them costs the client cache misses
    // on every delivery, on the cores the server shares (docs/dev/speed-log.md, "The SSE fan-out
    // (point 5)").
    let mut latencies = Vec::with_capacity(4096);
    // One future for the end of the run, not a timer armed and cleared on every read.
    let end = async move {
        loop {
            let stop_at = *stop.borrow_and_update();
            if let Some(at) = stop_at {
                tokio::time::sleep_until(at.into()).await;
                return;
            }
            if stop.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::pin!(end);
    loop {
        let mut n = 0;
        let done = chunked.decode(conn.buffer(), Some(&mut text), &mut n)?;
        parser.feed(&mut text, base64, |sent_us| {
            let now_us = micros_since(base);
            latencies.push(now_us.saturating_sub(sent_us).saturating_mul(1000).max(1));
        })?;
        if done {
            return Err(HttpError::Closed);
        }
        tokio::select! {
            filled = conn.fill() => filled?,
            () = &mut end => return Ok(latencies),
        }
    }
}

/// Splits SSE text into events and hands the send time of every record in a `data` event to
/// `on_record`.
#[derive(Debug, Default)]
struct EventParser {
    data: Vec<u8>,
    decoded: Vec<u8>,
}

impl EventParser {
    fn feed(
        &mut self,
        text: &mut Vec<u8>,
        base64: bool,
        mut on_record: impl FnMut(u64),
    ) -> Result<(), HttpError> {
        // Byte-at-a-time scans here are a visible share of the client's CPU in the fan-out, on
        // the same cores as the server it measures (docs/dev/speed-log.md, "Earlier measurements
        // the code relies on"): memchr's vectorised search instead.
        if memchr::memchr(b'\r', text).is_some() {
            text.retain(|b| *b != b'\r');
        }
        let mut consumed = 0;
        while let Some(end) = memchr::memmem::find(&text[consumed..], b"\n\n") {
            let event = &text[consumed..consumed + end];
            consumed += end + 2;
            let mut is_data = false;
            self.data.clear();
            for line in event.split(|b| *b == b'\n') {
                if let Some(v) = line.strip_prefix(b"event:") {
                    is_data = v.trim_ascii() == b"data";
                } else if let Some(v) = line.strip_prefix(b"data:") {
                    let v = v.strip_prefix(b" ").unwrap_or(v);
                    if !base64 && !self.data.is_empty() {
                        self.data.push(b'\n');
                    }
                    self.data.extend_from_slice(v);
                }
            }
            if !is_data {
                continue;
            }
            let payload: &[u8] = if base64 {
                self.decoded.clear();
                base64::engine::general_purpose::STANDARD
                    .decode_vec(&self.data, &mut self.decoded)
                    .map_err(|e| HttpError::Parse(format!("SSE base64: {e}")))?;
                &self.decoded
            } else {
                &self.data
            };
            for rec in payload.split(|b| *b == b'\n').filter(|r| !r.is_empty()) {
                let sent = std::str::from_utf8(rec)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| {
                        HttpError::Parse(format!(
                            "unexpected SSE record {:?}",
                            String::from_utf8_lossy(rec)
                        ))
                    })?;
                on_record(sent);
            }
        }
        text.drain(..consumed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_base64_and_text_events() {
        let mut p = EventParser::default();
        let mut got = Vec::new();
        // "00000000000000000042\n00000000000000000043\n" in base64, split over two data lines.
        let b64 = base64::engine::general_purpose::STANDARD
            .encode(b"00000000000000000042\n00000000000000000043\n");
        let (a, b) = b64.split_at(10);
        let mut text = format!(
            "event: control\ndata:{{\"x\":1}}\n\nevent: data\ndata:{a}\r\ndata:{b}\n\nevent: da"
        )
        .into_bytes();
        p.feed(&mut text, true, |t| got.push(t)).expect("feed");
        assert_eq!(got, vec![42, 43]);
        assert_eq!(text, b"event: da");
        let mut text = b"event: data\ndata: 00000000000000000007\ndata:\n\n".to_vec();
        p.feed(&mut text, false, |t| got.push(t)).expect("feed");
        assert_eq!(got, vec![42, 43, 7]);
    }
}
