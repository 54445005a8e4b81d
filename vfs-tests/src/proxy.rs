//! A fault-injecting HTTP/1.1 proxy on a loopback port: it forwards requests to the server,
//! or refuses them, resets them, or drops the server's answer, by rules the test sets.
//! One request per connection (it answers with `Connection: close`).

use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::io::Write;
use std::net::Shutdown;
use std::net::TcpListener;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

#[derive(Debug, Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Canned {
    pub fn new(status: u16, headers: &[(&str, &str)], body: &str) -> Canned {
        Canned {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Action {
    /// Answer without forwarding.
    Respond(Canned),
    /// Forward, then close the client's connection without answering.
    ForwardThenDrop,
    /// Forward, then answer with this instead of the server's answer (a rule-breaking layer).
    ForwardThenRespond(Canned),
    /// Close the connection without forwarding.
    Reset,
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub method: String,
    /// Applies when the request path contains this.
    pub path_contains: String,
    pub action: Action,
    /// How many more requests it applies to; `None` for all.
    pub times: Option<usize>,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    /// (method, path) of every request received.
    seen: Vec<(String, String)>,
    /// When set, requests without `Authorization: Bearer <token>` get a 401.
    bearer: Option<String>,
}

pub struct Proxy {
    pub port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

struct Request {
    method: String,
    path: String,
    authorization: Option<String>,
    head: Vec<u8>,
    body: Vec<u8>,
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(stream.try_clone().ok()?);
    let mut head = Vec::new();
    let mut first = String::new();
    r.read_line(&mut first).ok()?;
    if first.is_empty() {
        return None;
    }
    let mut parts = first.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    head.extend_from_slice(first.as_bytes());
    let mut len = 0usize;
    let mut authorization = None;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            authorization = line.split_once(':').map(|(_, v)| v.trim().to_owned());
        }
        if lower.starts_with("connection:") {
            continue;
        }
        head.extend_from_slice(line.as_bytes());
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        authorization,
        head,
        body,
    })
}

fn forward(upstream: u16, req: &Request) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", upstream)).ok()?;
    s.write_all(&req.head).ok()?;
    s.write_all(&req.body).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    Some(out)
}

fn write_canned(stream: &mut TcpStream, c: &Canned) {
    let mut out = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        c.status,
        c.body.len()
    );
    for (k, v) in &c.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let _ = stream.write_all(out.as_bytes());
    let _ = stream.write_all(&c.body);
}

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, stp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stp.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = conn else { continue };
                let st = st.clone();
                std::thread::spawn(move || serve(stream, upstream, &st));
            }
        });
        Proxy { port, state, stop }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn add(&self, method: &str, path_contains: &str, action: Action, times: Option<usize>) {
        self.state.lock().expect("proxy state").rules.push(Rule {
            method: method.to_owned(),
            path_contains: path_contains.to_owned(),
            action,
            times,
        });
    }

    /// Refuses every request without `Authorization: Bearer <token>` with 401; `None` stops.
    pub fn require_bearer(&self, token: Option<&str>) {
        self.state.lock().expect("proxy state").bearer = token.map(str::to_owned);
    }

    pub fn clear(&self) {
        self.state.lock().expect("proxy state").rules.clear();
    }

    /// How many requests with this method reached the proxy.
    pub fn count(&self, method: &str) -> usize {
        self.state
            .lock()
            .expect("proxy state")
            .seen
            .iter()
            .filter(|(m, _)| m == method)
            .count()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(mut stream: TcpStream, upstream: u16, state: &Mutex<State>) {
    let Some(req) = read_request(&stream) else {
        return;
    };
    let action = {
        let mut st = state.lock().expect("proxy state");
        st.seen.push((req.method.clone(), req.path.clone()));
        if let Some(want) = &st.bearer
            && req.authorization.as_deref() != Some(&format!("Bearer {want}"))
        {
            drop(st);
            write_canned(&mut stream, &Canned::new(401, &[], "token refused"));
            return;
        }
        let found = st.rules.iter_mut().find(|r| {
            r.method == req.method
                && req.path.contains(&r.path_contains)
                && r.times.is_none_or(|t| t > 0)
        });
        found.map(|r| {
            if let Some(t) = r.times.as_mut() {
                *t -= 1;
            }
            r.action.clone()
        })
    };
    match action {
        None => match forward(upstream, &req) {
            Some(answer) => {
                let _ = stream.write_all(&answer);
            }
            None => {
                let _ = stream.shutdown(Shutdown::Both);
            }
        },
        Some(Action::Respond(c)) => write_canned(&mut stream, &c),
        Some(Action::ForwardThenDrop) => {
            let _ = forward(upstream, &req);
            let _ = stream.shutdown(Shutdown::Both);
        }
        Some(Action::ForwardThenRespond(c)) => {
            let _ = forward(upstream, &req);
            write_canned(&mut stream, &c);
        }
        Some(Action::Reset) => {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}
