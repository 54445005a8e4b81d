//! A scripted stand-in for a node's HTTP planes: it answers `/__ursula/metrics` with a fixed
//! process incarnation and every other request with what the test's handler says, and records
//! every request. It lets `backup-create` and `restore` be tested on their decisions (which
//! answer is kept, what is refused before any import) without a cluster.

use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::Mutex;

/// One request the stub received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        let (_, value) = self.headers.iter().find(|(n, _)| n == name)?;
        Some(value)
    }
}

pub type Handler = dyn Fn(&Request) -> (u16, Vec<u8>) + Send + Sync;

/// A running stub node; it serves until the test process ends.
pub struct StubNode {
    pub id: u64,
    pub url: String,
    pub incarnation: String,
    pub log: Arc<Mutex<Vec<Request>>>,
}

impl StubNode {
    pub fn start(
        id: u64,
        handler: impl Fn(&Request) -> (u16, Vec<u8>) + Send + Sync + 'static,
    ) -> StubNode {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let incarnation = format!("stub-{id}");
        let log = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let (inc, lg) = (incarnation.clone(), log.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (h, inc, lg) = (handler.clone(), inc.clone(), lg.clone());
                std::thread::spawn(move || serve(conn, id, &inc, &*h, &lg));
            }
        });
        StubNode {
            id,
            url,
            incarnation,
            log,
        }
    }

    /// Requests other than metrics, as `METHOD path`.
    pub fn calls(&self) -> Vec<String> {
        self.log
            .lock()
            .expect("log")
            .iter()
            .filter(|r| r.path != "/__ursula/metrics")
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().expect("log").clone()
    }
}

fn serve(conn: TcpStream, id: u64, incarnation: &str, h: &Handler, log: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let req = Request {
        method,
        path,
        headers,
        body,
    };
    let (status, answer) = if req.path == "/__ursula/metrics" {
        let m = format!(r#"{{"node_id":{id},"process_incarnation":"{incarnation}"}}"#);
        (200, m.into_bytes())
    } else {
        h(&req)
    };
    log.lock().expect("log").push(req);
    let mut conn = conn;
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        answer.len()
    );
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(&answer);
    let _ = conn.flush();
}

/// A node manifest naming every stub's URL as both planes.
pub fn manifest(dir: &std::path::Path, nodes: &[&StubNode]) -> String {
    let entries: Vec<String> = nodes
        .iter()
        .map(|n| {
            format!(
                r#"{{"id": {}, "http_url": "{}", "admin_url": "{}"}}"#,
                n.id, n.url, n.url
            )
        })
        .collect();
    let path = dir.join("nodes.json");
    std::fs::write(&path, format!(r#"{{"nodes": [{}]}}"#, entries.join(", "))).expect("manifest");
    path.display().to_string()
}

/// `/__ursula/backup/info`'s JSON.
pub fn info(format_version: u32, raft_group_count: u32, node_id: u64) -> (u16, Vec<u8>) {
    let i = ursula_state::backup::BackupInfo {
        format_version,
        raft_group_count,
        node_id,
    };
    (200, serde_json::to_vec(&i).expect("json"))
}

/// The group id in `/__ursula/backup/group/{g}[/...]`.
pub fn group_of(path: &str) -> Option<u32> {
    path.strip_prefix("/__ursula/backup/group/")?
        .split('/')
        .next()?
        .parse()
        .ok()
}
