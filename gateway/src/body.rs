//! Request bodies: [`read_body`] buffers a body to forward it, within the limit, its share of
//! the [`Budget`] and the pace a body must keep; [`drain`] reads and drops the body of a
//! request refused without it, so that a client that sends its whole body before it reads
//! the answer gets the refusal rather than a reset, and the connection stays usable.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use bytes::BytesMut;
use http_body_util::BodyExt;
use hyper::body::Body;
use hyper::body::Frame;
use tokio::time::Instant;

use crate::reply::BoxError;
use crate::reply::error_chain;
use crate::uploads::Budget;
use crate::uploads::Reservation;
use crate::uploads::UploadLimits;

/// How fast a body must arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Cut once no byte arrived for this long.
    pub stall: Duration,
    /// Cut once less than this per second arrived over one `stall` window (0: no such check).
    pub min_bytes_per_sec: u64,
    /// Cut once the reading took this long in all (`None`: no bound).
    pub total: Option<Duration>,
}

impl Pace {
    /// The drain before a refusal decided from the head: 5 s without data, 30 s in all.
    pub const HEAD_REFUSAL: Pace = Pace {
        stall: Duration::from_secs(5),
        min_bytes_per_sec: 0,
        total: Some(Duration::from_secs(30)),
    };

    /// A body to forward, and the drain before a refusal decided while reading one: the
    /// stall timeout, the minimum rate, and `--body-read-timeout` in all, so that a body that
    /// keeps arriving just fast enough cannot hold its share of the budget for ever.
    pub fn forwarded(limits: &UploadLimits) -> Pace {
        Pace {
            stall: limits.body_stall_timeout(),
            min_bytes_per_sec: limits.body_min_bytes_per_sec(),
            total: Some(limits.body_read_timeout()),
        }
    }
}

/// Why a body was not read to forward it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Over `--max-request-body-bytes`, declared or counted.
    TooLarge,
    /// It kept no [`Pace`].
    TooSlow,
    /// The client's stream failed (a reset, a length that does not match, ...).
    Unreadable(String),
    /// Its share of the budget stayed spent for `--body-budget-wait-ms`, after `read` bytes
    /// of it were read (and dropped).
    BudgetExhausted { read: u64 },
}

/// The clock of one reading: stall, windows, total.
struct Watch {
    pace: Pace,
    start: Instant,
    last_data: Instant,
    window_start: Instant,
    window_bytes: u64,
}

impl Watch {
    fn new(pace: Pace) -> Watch {
        let now = Instant::now();
        Watch {
            pace,
            start: now,
            last_data: now,
            window_start: now,
            window_bytes: 0,
        }
    }

    /// Starts the stall and the window over: time spent waiting on the gateway (for the
    /// budget) is not the client's.
    fn resume(&mut self) {
        let now = Instant::now();
        self.last_data = now;
        self.window_start = now;
        self.window_bytes = 0;
    }

    fn window_end(&self) -> Option<Instant> {
        (self.pace.min_bytes_per_sec > 0).then(|| self.window_start + self.pace.stall)
    }

    /// When the next check is due.
    fn deadline(&self) -> Instant {
        let mut d = self.last_data + self.pace.stall;
        if let Some(w) = self.window_end() {
            d = d.min(w);
        }
        if let Some(t) = self.pace.total {
            d = d.min(self.start + t);
        }
        d
    }

    /// Runs the checks due by `now`: `false` once the body is too slow.
    fn on_time(&mut self, now: Instant) -> bool {
        if self.pace.total.is_some_and(|t| now >= self.start + t)
            || now >= self.last_data + self.pace.stall
        {
            return false;
        }
        while let Some(end) = self.window_end().filter(|&e| now >= e) {
            let wanted = self.pace.min_bytes_per_sec as f64 * self.pace.stall.as_secs_f64();
            if (self.window_bytes as f64) < wanted {
                return false;
            }
            self.window_start = end;
            self.window_bytes = 0;
        }
        true
    }

    fn on_data(&mut self, n: usize) {
        self.last_data = Instant::now();
        self.window_bytes += n as u64;
    }
}

enum Next {
    Data(Bytes),
    End,
    TooSlow,
    Failed(String),
}

/// The next data of `body`, within the pace.
async fn next_data<B>(body: &mut Pin<&mut B>, watch: &mut Watch) -> Next
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    loop {
        if !watch.on_time(Instant::now()) {
            return Next::TooSlow;
        }
        let frame: Option<Result<Frame<Bytes>, B::Error>> =
            match tokio::time::timeout_at(watch.deadline(), body.frame()).await {
                Err(_) => continue,
                Ok(f) => f,
            };
        match frame {
            None => return Next::End,
            Some(Err(e)) => return Next::Failed(error_chain(&*e.into())),
            Some(Ok(frame)) => {
                // Trailers carry no data; the nodes take none, so they are dropped.
                if let Ok(data) = frame.into_data() {
                    watch.on_data(data.len());
                    if !data.is_empty() {
                        return Next::Data(data);
                    }
                }
            }
        }
    }
}

/// Reads a whole body to forward it. Its share of `budget` is reserved before the first
/// byte is read (its declared length, or `--small-body-max-bytes` and more as it grows), and
/// it is copied into one buffer of that size as it arrives. The share comes back with the
/// [`Reservation`], which the caller drops once the body was forwarded.
pub async fn read_body<B>(
    mut body: Pin<&mut B>,
    declared: Option<u64>,
    limits: &UploadLimits,
    budget: &Budget,
) -> Result<(Bytes, Reservation), BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let limit = limits.max_request_body_bytes();
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    if body.is_end_stream() {
        return Ok((Bytes::new(), Reservation::default()));
    }
    let first = declared.unwrap_or(limits.small_body_max_bytes()).min(limit);
    let mut share = budget
        .reserve(first)
        .await
        .map_err(|_| BodyError::BudgetExhausted { read: 0 })?;
    let mut buf = BytesMut::with_capacity(usize::try_from(first).unwrap_or(0));
    let mut watch = Watch::new(Pace::forwarded(limits));
    loop {
        let data = match next_data(&mut body, &mut watch).await {
            Next::Data(d) => d,
            Next::End => break,
            Next::TooSlow => return Err(BodyError::TooSlow),
            Next::Failed(why) => return Err(BodyError::Unreadable(why)),
        };
        let need = buf.len() as u64 + data.len() as u64;
        if need > limit {
            return Err(BodyError::TooLarge);
        }
        if need > share.bytes() {
            // A body without a length (or longer than declared, which hyper refuses anyway):
            // double the share, so a growing body reserves a few times, not per piece.
            let to = need.max(share.bytes().saturating_mul(2)).min(limit);
            budget
                .grow(&mut share, to)
                .await
                .map_err(|_| BodyError::BudgetExhausted {
                    read: buf.len() as u64,
                })?;
            watch.resume();
            buf.reserve(usize::try_from(to).unwrap_or(0).saturating_sub(buf.len()));
        }
        buf.extend_from_slice(&data);
    }
    Ok((buf.freeze(), share))
}

/// What [`drain`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    pub bytes: u64,
    /// Read to its end: the connection can carry the next request.
    pub complete: bool,
}

/// Reads and drops the rest of a refused request's body, at most `limit` bytes in all, at
/// `pace`. A body declared over `limit` is left unread.
pub async fn drain<B>(
    mut body: Pin<&mut B>,
    declared: Option<u64>,
    read_before: u64,
    limit: u64,
    pace: Pace,
) -> Drained
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut out = Drained {
        bytes: 0,
        complete: false,
    };
    if declared.is_some_and(|n| n > limit) {
        return out;
    }
    let mut watch = Watch::new(pace);
    loop {
        match next_data(&mut body, &mut watch).await {
            Next::Data(d) => {
                out.bytes += d.len() as u64;
                if read_before + out.bytes > limit {
                    return out;
                }
            }
            Next::End => {
                out.complete = true;
                return out;
            }
            Next::TooSlow | Next::Failed(_) => return out,
        }
    }
}

#[cfg(test)]
mod tests {

    use http_body_util::channel::Channel;
    use http_body_util::channel::Sender;

    use super::*;
    use crate::uploads::UploadArgs;
    use crate::uploads::UploadLimitsSpec;

    type Fed = Channel<Bytes>;

    /// A body fed from a channel, so that a test decides when each piece arrives.
    fn fed() -> (Sender<Bytes>, Fed) {
        Channel::new(64)
    }

    /// A body of `piece` `times` over, sent by a task as fast as the reader takes it.
    fn fed_with(piece: Bytes, times: usize) -> Fed {
        let (mut tx, body) = fed();
        tokio::spawn(async move {
            for _ in 0..times {
                let _ = tx.send_data(piece.clone()).await;
            }
        });
        body
    }

    fn limits(stall_ms: u64, min_rate: u64) -> UploadLimits {
        UploadLimits::try_from(UploadLimitsSpec {
            body_stall_timeout: Duration::from_millis(stall_ms),
            body_min_bytes_per_sec: min_rate,
            body_budget_wait: Duration::from_millis(20),
            // 32 MiB for large bodies beside the 32 MiB of headroom.
            body_budget_bytes: Some(64 * 1024 * 1024),
            ..UploadLimitsSpec::from(&UploadArgs::default())
        })
        .expect("limits")
    }

    #[tokio::test]
    async fn a_body_is_read_whole_into_its_declared_share() {
        let l = limits(1_000, 0);
        let budget = Budget::new(&l);
        let mut body = std::pin::pin!(fed_with(Bytes::from_static(&[7; 1000]), 4));
        let (bytes, share) = read_body(body.as_mut(), Some(4000), &l, &budget)
            .await
            .expect("read");
        assert_eq!(bytes.len(), 4000);
        assert_eq!(share.bytes(), 4096);
        assert_eq!(budget.reserved_bytes(), 4096);
        drop(share);
        assert_eq!(budget.reserved_bytes(), 0);
    }

    #[tokio::test]
    async fn a_body_without_a_length_grows_its_share_as_it_arrives() {
        let l = limits(1_000, 0);
        let budget = Budget::new(&l);
        let mut body = std::pin::pin!(fed_with(Bytes::from(vec![1; 1024 * 1024]), 3));
        let (bytes, share) = read_body(body.as_mut(), None, &l, &budget)
            .await
            .expect("read");
        assert_eq!(bytes.len(), 3 * 1024 * 1024);
        assert_eq!(share.bytes(), 4 * 1024 * 1024);
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_is_too_slow_and_gives_its_share_back() {
        let l = limits(200, 0);
        let budget = Budget::new(&l);
        let (mut tx, body) = fed();
        let mut body = std::pin::pin!(body);
        tx.send_data(Bytes::from_static(b"half"))
            .await
            .expect("send");
        let got = read_body(body.as_mut(), Some(100), &l, &budget).await;
        assert_eq!(got.err(), Some(BodyError::TooSlow));
        assert_eq!(budget.reserved_bytes(), 0);
        drop(tx);
    }

    #[tokio::test]
    async fn a_body_below_the_minimum_rate_over_a_window_is_too_slow() {
        // 300 ms windows at 100 KiB/s want 30 KiB per window; 10 bytes every 20 ms never stall.
        let l = limits(300, 100 * 1024);
        let budget = Budget::new(&l);
        let (mut tx, body) = fed();
        let mut body = std::pin::pin!(body);
        let feeder = tokio::spawn(async move {
            for _ in 0..500 {
                if tx.send_data(Bytes::from_static(&[0; 10])).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let got = read_body(body.as_mut(), Some(5000), &l, &budget).await;
        assert_eq!(got.err(), Some(BodyError::TooSlow));
        feeder.abort();
    }

    #[tokio::test]
    async fn a_spent_budget_is_exhausted_before_any_byte_is_read() {
        let l = limits(1_000, 0);
        let budget = Budget::new(&l);
        let all = budget
            .reserve(l.max_request_body_bytes())
            .await
            .expect("the rest");
        let mut headroom = Vec::new();
        for _ in 0..32 {
            headroom.push(budget.reserve(1024 * 1024).await.expect("headroom"));
        }
        let (mut tx, body) = fed();
        let mut body = std::pin::pin!(body);
        tx.send_data(Bytes::from_static(b"abc"))
            .await
            .expect("send");
        drop(tx);
        let got = read_body(body.as_mut(), Some(3), &l, &budget).await;
        assert_eq!(got.err(), Some(BodyError::BudgetExhausted { read: 0 }));
        // The body is still there for the drain.
        let d = drain(body.as_mut(), Some(3), 0, 100, Pace::HEAD_REFUSAL).await;
        assert_eq!(
            d,
            Drained {
                bytes: 3,
                complete: true
            }
        );
        drop(all);
    }

    #[tokio::test]
    async fn a_drain_stops_past_the_limit_and_leaves_a_declared_oversize_unread() {
        let (mut tx, body) = fed();
        let mut body = std::pin::pin!(body);
        for _ in 0..3 {
            tx.send_data(Bytes::from_static(&[0; 60]))
                .await
                .expect("send");
        }
        let d = drain(body.as_mut(), None, 0, 100, Pace::HEAD_REFUSAL).await;
        assert_eq!(
            d,
            Drained {
                bytes: 120,
                complete: false
            }
        );
        let d = drain(body.as_mut(), Some(101), 0, 100, Pace::HEAD_REFUSAL).await;
        assert_eq!(
            d,
            Drained {
                bytes: 0,
                complete: false
            }
        );
    }
}
