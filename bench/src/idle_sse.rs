//! Idle SSE subscribers: `subscribers` connections follow one `text/plain` stream with
//! `?offset=now&live=sse` and wait. The server's `VmRSS` growth while they are held, divided by
//! their count, is the memory a live reader costs; one append afterwards shows whether every
//! one of them is still served.

use std::time::Duration;
use std::time::Instant;

use serde::Deserialize;
use serde::Serialize;

use crate::BoxError;
use crate::http::Conn;
use crate::http::Target;
use crate::load::REQUEST_LIMIT;
use crate::procfs;

const PATH: &str = "/v1/stream/idle-sse";
/// What the probe append writes; found verbatim in a `text/plain` stream's SSE events.
const PROBE: &str = "idle-sse-probe";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdleSse {
    pub subscribers: usize,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub bytes_per_subscriber: f64,
    /// Subscribers that received the probe append within the time allowed.
    pub delivered: usize,
    /// Seconds from the probe's acknowledgement until the last subscriber had it.
    pub delivery_s: f64,
}

fn text_request(target: &Target, method: &str, body: &str) -> Vec<u8> {
    format!(
        "{method} {PATH} HTTP/1.1\r\nHost: {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        target.host,
        body.len()
    )
    .into_bytes()
}

pub async fn run(
    target: &Target,
    pid: u32,
    subscribers: usize,
    settle: Duration,
) -> Result<IdleSse, BoxError> {
    let rss = || {
        procfs::status_kib(pid, "VmRSS")
            .ok_or_else(|| BoxError::from(format!("cannot read VmRSS of {pid}")))
    };
    let mut admin = Conn::connect(target).await?;
    let (status, _) = admin
        .roundtrip_within(&text_request(target, "PUT", ""), REQUEST_LIMIT)
        .await?;
    if !(200..300).contains(&status) {
        return Err(format!("creating {PATH} answered {status}").into());
    }
    tokio::time::sleep(settle).await;
    let before = rss()?;
    let get = format!(
        "GET {PATH}?offset=now&live=sse HTTP/1.1\r\nHost: {}\r\n\r\n",
        target.host
    )
    .into_bytes();
    let mut held = Vec::with_capacity(subscribers);
    for i in 0..subscribers {
        let mut c = Conn::connect(target).await?;
        c.send(&get).await?;
        let head = tokio::time::timeout(REQUEST_LIMIT, c.read_head())
            .await
            .map_err(|_| format!("subscriber {i}: no response head"))??;
        if head.status != 200 {
            return Err(format!("subscriber {i}: status {}", head.status).into());
        }
        held.push(c);
    }
    tokio::time::sleep(settle).await;
    let after = rss()?;
    let bytes_per_subscriber =
        (after.saturating_sub(before) * 1024) as f64 / subscribers.max(1) as f64;

    let (status, _) = admin
        .roundtrip_within(&text_request(target, "POST", PROBE), REQUEST_LIMIT)
        .await?;
    if !(200..300).contains(&status) {
        return Err(format!("the probe append answered {status}").into());
    }
    let acked = Instant::now();
    let deadline = acked + Duration::from_secs(30);
    let mut delivered = 0;
    for c in &mut held {
        loop {
            if c.buffer()
                .windows(PROBE.len())
                .any(|w| w == PROBE.as_bytes())
            {
                delivered += 1;
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, c.fill()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => break,
            }
        }
    }
    let delivery_s = acked.elapsed().as_secs_f64();
    eprintln!(
        "ursula-bench: {subscribers} idle SSE subscribers: RSS {before} KiB -> {after} KiB, \
         {bytes_per_subscriber:.0} B each; the probe reached {delivered} in {delivery_s:.2} s"
    );
    Ok(IdleSse {
        subscribers,
        rss_before_kib: before,
        rss_after_kib: after,
        bytes_per_subscriber,
        delivered,
        delivery_s,
    })
}
