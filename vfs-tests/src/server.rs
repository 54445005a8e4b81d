//! A real `ursula server` child process on a loopback port.

use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

pub struct Server {
    pub port: u16,
    child: Option<Child>,
    /// The config file's directory, when the node runs with one.
    config: Option<tempfile::TempDir>,
}

impl Server {
    pub fn start() -> Server {
        let mut s = Server {
            port: crate::free_port(),
            child: None,
            config: None,
        };
        s.spawn();
        s
    }

    /// A node that runs with this config file (test hooks under `[testing]`, for example).
    pub fn start_with_config(toml: &str) -> Server {
        let dir = tempfile::tempdir().expect("config dir");
        std::fs::write(dir.path().join("ursula.toml"), toml).expect("config");
        let mut s = Server {
            port: crate::free_port(),
            child: None,
            config: Some(dir),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let bin = crate::target_dir().join("ursula");
        assert!(
            bin.exists(),
            "build the server first: {} is missing",
            bin.display()
        );
        let mut cmd = Command::new(bin);
        cmd.arg("server");
        if let Some(dir) = &self.config {
            cmd.arg("--config").arg(dir.path().join("ursula.toml"));
        }
        let child = cmd
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            // Servers of one host need admin planes apart; these tests use none.
            .args(["--admin-listen", "off"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn ursula");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if ureq::get(&format!("{}/__ursula/ready", self.base()))
                .call()
                .is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("ursula did not become ready on port {}", self.port);
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the node and starts an empty one on the same port (the in-memory engine keeps nothing).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Status, headers and body of an answer.
pub type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// A plain HTTP client for checks against the server, with statuses as values.
pub fn http(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    try_http(method, url, headers, body).expect("http request")
}

/// Like [`http`], `None` when no answer came (nothing listens yet, say).
pub fn try_http(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<Answer> {
    // No deadline of its own: a long-poll read answers when it answers.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    ursula_testkit::http::request(&agent, method, url, headers, body).ok()
}

pub fn header<'a>(hs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    hs.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}
