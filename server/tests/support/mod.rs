//! Process helpers for tests that run the real `ursula` binary on loopback ports: start it
//! with arguments and environment, wait until it answers, send requests that follow 307s to
//! the leader, SIGKILL and restart it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// A fresh directory under the system temp dir, removed first if a previous run left it.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ursula-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A running `ursula` process; killed on drop.
pub struct Proc {
    child: Option<Child>,
    pub port: u16,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
}

impl Proc {
    pub fn start(port: u16, args: Vec<String>, env: Vec<(String, String)>, log: PathBuf) -> Proc {
        let mut p = Proc {
            child: None,
            port,
            args,
            env,
            log,
        };
        p.spawn();
        p
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_ursula"))
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn ursula");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            // Answering is enough: a fresh cluster node stays unready until its peers are up.
            if agent().get(self.url("/__ursula/ready")).call().is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "node on {} not ready: {}",
            self.port,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub type Answer = (u16, BTreeMap<String, String>, Vec<u8>);

/// Sends a request to `url`, following 307s by hand (at most a few hops).
pub fn send_url(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<Answer> {
    let mut url = url.to_owned();
    for _ in 0..4 {
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = agent().run(req.body(body.to_vec()).ok()?).ok()?;
        let status = resp.status().as_u16();
        let hs: BTreeMap<String, String> = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let bytes = resp.body_mut().read_to_vec().unwrap_or_default();
        if status == 307 {
            url = hs.get("location")?.clone();
            continue;
        }
        return Some((status, hs, bytes));
    }
    None
}

/// Polls `f` every 50 ms until it returns `Some`, or panics with `what` after `secs`.
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The node's metrics as JSON.
pub fn metrics(base: &str) -> serde_json::Value {
    let (status, _, body) =
        send_url("GET", &format!("{base}/__ursula/metrics"), &[], b"").expect("metrics");
    assert_eq!(status, 200);
    serde_json::from_slice(&body).expect("metrics json")
}
