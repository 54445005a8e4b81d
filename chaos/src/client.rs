//! Plain HTTP for the clients and the nemesis: one request at a time, following `307`s to the
//! leader by hand so the history can name the node that answered.

use std::collections::BTreeMap;

/// An agent that reports every status as an answer and follows no redirect itself.
pub use ursula_testkit::http::agent;

/// An answer: its status, its headers (lower-case names), its body and the URL that gave it.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub url: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// `Stream-Next-Offset` as a number.
    pub fn next_offset(&self) -> Option<u64> {
        self.header("stream-next-offset")?.parse().ok()
    }

    pub fn up_to_date(&self) -> bool {
        self.header("stream-up-to-date") == Some("true")
    }

    pub fn not_applied(&self) -> bool {
        self.headers.contains_key("x-ursula-not-applied")
    }
}

/// Sends one request to `url` and follows up to three `307`s; `None` when no answer came
/// (reset, refused, timed out).
pub fn send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<Answer> {
    let mut url = url.to_owned();
    for _ in 0..4 {
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = agent.run(req.body(body.to_vec()).ok()?).ok()?;
        let status = resp.status().as_u16();
        let headers: BTreeMap<String, String> = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let body = resp.body_mut().read_to_vec().ok()?;
        if status == 307 {
            url = headers.get("location")?.clone();
            continue;
        }
        return Some(Answer {
            status,
            headers,
            body,
            url,
        });
    }
    None
}

/// An offset as the protocol spells it in a URL.
pub fn offset(o: u64) -> String {
    format!("{o:020}")
}
