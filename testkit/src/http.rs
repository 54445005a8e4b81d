//! Plain HTTP for tests, over ureq: an agent that reports every status as an answer and follows
//! no redirect, and one request's status, headers and body.

use std::time::Duration;

/// What a request got: status, headers in the order they came (names lower-case), body.
pub type Raw = (u16, Vec<(String, String)>, Vec<u8>);

/// An agent that reports statuses instead of failing on them, follows no redirect itself, and
/// gives up on a whole request after `timeout`.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// Reads an SSE body from `reader` up to the end of its first `control` event; returns the
/// text read. Fails when the stream ends first.
pub fn sse_through_control(reader: &mut impl std::io::Read) -> String {
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.contains("event: control") || !text.ends_with("\n\n") {
        let n = reader.read(&mut buf).expect("SSE read");
        assert!(n > 0, "the SSE stream ended early: {text:?}");
        text.push_str(std::str::from_utf8(&buf[..n]).expect("SSE is UTF-8"));
    }
    text
}

/// Sends one request; `Err` when no answer came (nothing listens, the connection broke, the
/// request could not be built).
pub fn request(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Raw, ureq::Error> {
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = agent.run(req.body(body.to_vec())?)?;
    let status = resp.status().as_u16();
    let hs = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    // ureq stops at 10 MiB by default; snapshot bodies in tests and the soak reach 64 MiB.
    let body = resp
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
        .unwrap_or_default();
    Ok((status, hs, body))
}
