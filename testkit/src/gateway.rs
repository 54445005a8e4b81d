//! Helpers shared by the tests that run `ursula gateway` in front of real `ursula server`
//! processes on loopback ports: scratch directories, processes killed on drop, a node, a
//! gateway, and plain requests.

#![allow(dead_code)]

use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

pub use crate::ports::free_port;
pub use crate::scratch::Scratch;

pub const MARKER: &str = "x-ursula-not-applied";
pub const VOUCH: &str = "x-ursula-not-applied-checked";

pub fn agent() -> ureq::Agent {
    crate::http::agent(Duration::from_secs(15))
}

/// A running `ursula` process (node or gateway), killed on drop.
pub struct Proc {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Proc {
    /// Starts `ursula ARGS` and waits until `probe` answers 200.
    pub fn start(scratch: &Scratch, name: &str, port: u16, args: &[String], probe: &str) -> Proc {
        let mut p = Proc::spawn(scratch, name, port, args);
        p.wait_for(name, probe);
        p
    }

    pub fn spawn(scratch: &Scratch, name: &str, port: u16, args: &[String]) -> Proc {
        let log = scratch.path().join(format!("{name}.log"));
        // Nodes get an admin plane of their own, unless the test names one: the default port
        // would let one node start.
        let admin: Vec<String> = if args.first().is_some_and(|a| a == "server")
            && !args.iter().any(|a| a == "--admin-listen")
        {
            vec![
                "--admin-listen".into(),
                format!("127.0.0.1:{}", free_port()),
            ]
        } else {
            Vec::new()
        };
        let mut cmd = Command::new(crate::bins::ursula());
        let child = scratch
            .isolate(&mut cmd)
            .args(args)
            .args(&admin)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn ursula");
        Proc { child, port, log }
    }

    pub fn wait_for(&mut self, name: &str, probe: &str) {
        self.wait_until(name, probe, |status| status == 200);
    }

    /// Waits until the process answers `probe` with any HTTP status: an access-controlled
    /// gateway answers its internal paths with `404`.
    pub fn wait_answering(&mut self, name: &str, probe: &str) {
        self.wait_until(name, probe, |_| true);
    }

    /// Polls `probe` until its status passes `ready`, failing when the process exits or after
    /// 30 s, with its log.
    fn wait_until(&mut self, name: &str, probe: &str, ready: impl Fn(u16) -> bool) {
        let (url, path) = (self.url(probe), self.log.clone());
        let log = || std::fs::read_to_string(&path).unwrap_or_default();
        let within = Duration::from_secs(30);
        crate::process::wait_answering(&mut self.child, name, &url, within, ready, log);
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn base(&self) -> String {
        self.url("")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A single in-memory node.
pub fn memory_node(scratch: &Scratch) -> Proc {
    memory_node_with(scratch, &[])
}

/// A single in-memory node with `extra` arguments.
pub fn memory_node_with(scratch: &Scratch, extra: &[String]) -> Proc {
    let config = scratch.file("node.toml", "[runtime]\ncore_count = 2\n");
    let port = free_port();
    let mut args = vec![
        "server".into(),
        "--config".into(),
        config.display().to_string(),
        "--preset".into(),
        "default".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    args.extend_from_slice(extra);
    Proc::start(scratch, "node", port, &args, "/__ursula/ready")
}

/// How many live reads (long-polls, SSE) wait on `node`, from its metrics.
pub fn live_waiters(node: &Proc) -> u64 {
    let metrics = send("GET", &node.url("/__ursula/metrics"), &[], b"");
    let doc: serde_json::Value = serde_json::from_str(&metrics.body).expect("metrics JSON");
    doc["per_core_live_read_waiters"]
        .as_array()
        .expect("per_core_live_read_waiters")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .sum()
}

/// An in-memory node behind a gateway; fields drop in order, the processes before their
/// scratch directory.
pub struct Fronted {
    pub gw: Proc,
    pub node: Proc,
    pub scratch: Scratch,
}

/// Starts a [`Fronted`] pair in a scratch directory named after `name`; `extra` goes to the
/// gateway's arguments.
pub fn fronted(name: &str, extra: &[&str]) -> Fronted {
    let scratch = Scratch::new(name);
    let node = memory_node(&scratch);
    let gw = gateway(&scratch, "gateway", &[node.base()], extra);
    Fronted { gw, node, scratch }
}

pub fn gateway(scratch: &Scratch, name: &str, upstreams: &[String], extra: &[&str]) -> Proc {
    let port = free_port();
    let mut args = vec!["gateway".to_owned()];
    for u in upstreams {
        args.push("--upstream".into());
        args.push(u.clone());
    }
    args.push("--listen".into());
    args.push(format!("127.0.0.1:{port}"));
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Proc::start(scratch, name, port, &args, "/__ursula/gateway/metrics")
}

pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn vouched(&self) -> bool {
        self.header(VOUCH) == Some("1")
    }
}

pub fn send(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let (status, headers, body) = crate::http::request(&agent(), method, url, headers, body)
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub const TEXT: (&str, &str) = ("content-type", "text/plain");

/// Reads from a raw connection until `want` shows up, failing after 10 s.
pub fn read_until(s: &mut TcpStream, seen: &mut String, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while !seen.contains(want) {
        assert!(
            Instant::now() < deadline,
            "never saw {want:?}; got {seen:?}"
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("the connection closed before {want:?}; got {seen:?}"),
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("reading the SSE stream: {e}"),
        }
    }
}

/// One raw HTTP/1.1 exchange, the answer's bytes as they came with the `Date` value blanked:
/// the only header that legitimately differs between two answers a second apart.
pub fn raw(port: u16, method: &str, path: &str, auth: Option<&str>, body: &[u8]) -> String {
    let auth: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
    raw_with(port, method, path, &auth, body)
}

/// [`raw`] with any request headers.
pub fn raw_with(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> String {
    use std::io::Write;
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!(
            "content-type: text/plain\r\ncontent-length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("write");
    s.write_all(body).expect("body");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .split("\r\n")
        .map(|l| {
            if l.to_ascii_lowercase().starts_with("date:") {
                "date: <blanked>"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}
