//! HTTP against the cluster. A request goes to the nodes in turn, follows `307`s to the
//! leader, and is sent again while the answer is none, a `5xx` or a `307` chain that ends
//! nowhere: through a SIGKILL, a restart or an election. Appends carry a producer, so sending
//! one again cannot apply it twice.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

/// A definite answer: status, headers, body.
pub type Answer = ursula_testkit::http::Raw;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{method} {path}: no definite answer within {secs} s (last: {last})")]
    NoAnswer {
        method: String,
        path: String,
        secs: u64,
        last: String,
    },
}

pub struct Client {
    bases: Vec<String>,
    agent: ureq::Agent,
    next: AtomicUsize,
    patience: Duration,
    /// Requests sent again after an ambiguous answer.
    pub resent: AtomicUsize,
}

pub fn header<'a>(a: &'a Answer, name: &str) -> Option<&'a str> {
    a.1.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

impl Client {
    pub fn new(bases: Vec<String>) -> Client {
        let agent = ursula_testkit::http::agent(Duration::from_secs(30));
        Client {
            bases,
            agent,
            next: AtomicUsize::new(0),
            patience: Duration::from_secs(180),
            resent: AtomicUsize::new(0),
        }
    }

    /// Sends until a definite answer (any status but a `5xx`), following redirects.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Answer, ClientError> {
        self.send_tracked(method, path, headers, body)
            .map(|(a, _)| a)
    }

    /// [`Client::send`], also saying whether the request was sent again after an attempt that
    /// got no answer or a `5xx` (so the first one may have applied).
    pub fn send_tracked(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(Answer, bool), ClientError> {
        let start = Instant::now();
        let mut resent = false;
        let mut last = String::new();
        let mut wait = Duration::from_millis(50);
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len();
            let mut url = format!("{}{path}", self.bases[i]);
            for _ in 0..4 {
                match ursula_testkit::http::request(&self.agent, method, &url, headers, body) {
                    Ok(a) if a.0 == 307 => match header(&a, "location") {
                        Some(l) => url = l.to_owned(),
                        None => break,
                    },
                    Ok(a) if a.0 < 500 => return Ok((a, resent)),
                    Ok(a) => {
                        last = format!("{} {}", a.0, String::from_utf8_lossy(&a.2));
                        break;
                    }
                    Err(e) => {
                        last = e.to_string();
                        break;
                    }
                }
            }
            if start.elapsed() > self.patience {
                return Err(ClientError::NoAnswer {
                    method: method.into(),
                    path: path.into(),
                    secs: self.patience.as_secs(),
                    last,
                });
            }
            self.resent.fetch_add(1, Ordering::Relaxed);
            resent = true;
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }
}
