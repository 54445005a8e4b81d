//! A real `ursula server` child process on a loopback port (the workspace harness's restartable
//! node process, `ursula_testkit::cluster::Proc`), and plain HTTP checks against it.

use std::time::Duration;

use ursula_testkit::cluster::Proc;
use ursula_testkit::scratch::Scratch;

/// A single in-memory node; killed on drop. Its log and config live in a scratch directory of
/// its own, kept when the test fails.
pub struct Server {
    pub port: u16,
    node: Proc,
    /// After the node: it drops last.
    _dir: Scratch,
}

impl Server {
    pub fn start() -> Server {
        Server::launch(None)
    }

    /// A node that runs with this config file (test hooks under `[testing]`, for example).
    pub fn start_with_config(toml: &str) -> Server {
        Server::launch(Some(toml))
    }

    fn launch(toml: Option<&str>) -> Server {
        let dir = Scratch::new("vfs-server");
        let port = crate::free_port();
        let mut args: Vec<String> = vec!["server".into()];
        if let Some(toml) = toml {
            let config = dir.file("ursula.toml", toml);
            args.extend(["--config".into(), config.display().to_string()]);
        }
        // Servers of one host need admin planes apart; these tests use none.
        args.extend([
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--admin-listen".into(),
            "off".into(),
        ]);
        let node = Proc::start(port, args, dir.join("ursula.log"));
        let mut s = Server {
            port,
            node,
            _dir: dir,
        };
        s.wait_ready();
        s
    }

    fn wait_ready(&mut self) {
        self.node
            .wait_ready_until(Duration::from_secs(20), |status, _| status == 200);
    }

    pub fn base(&self) -> String {
        self.node.base()
    }

    /// The URL of `path` on this node.
    pub fn url(&self, path: &str) -> String {
        self.node.url(path)
    }

    pub fn stop(&mut self) {
        self.node.kill9();
    }

    /// Stops the node and starts an empty one on the same port (the in-memory engine keeps nothing).
    pub fn restart(&mut self) {
        self.stop();
        self.node.spawn();
        self.wait_ready();
    }
}

/// Status, headers and body of an answer.
pub type Answer = ursula_testkit::http::Raw;

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

/// Deletes the stream at `url` and creates it again, empty: another stream at the same URL.
pub fn recreate(url: &str) {
    assert_eq!(http("DELETE", url, &[], b"").0, 204, "delete {url}");
    let created = http(
        "PUT",
        url,
        &[("content-type", "application/octet-stream")],
        b"",
    );
    assert_eq!(created.0, 201, "create {url}");
}

pub fn header<'a>(hs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    hs.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}
