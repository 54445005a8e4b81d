//! The real `ursula` binary on a loopback port: the README quick start, what only a real
//! socket shows (Content-Length, chunked and truncated bodies, bytes hyper itself refuses),
//! startup refusals of bad config, and a clean stop on SIGTERM.

use std::io::Read;
use std::io::Write;
use std::net::TcpStream;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;

const BOOT: Duration = Duration::from_secs(15);

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// A running node; killed on drop.
struct Node {
    child: Child,
    port: u16,
    scratch: Scratch,
}

use crate::harness::http::sse_through_control;
use crate::harness::ports::free_port;
use crate::harness::process::exit_within;
use crate::harness::process::wait_answering;
use crate::harness::scratch::Scratch;

fn ursula(scratch: &Scratch, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ursula"));
    // An explicit config and a scratch home keep any ursula.toml on this machine out of the test.
    cmd.args(args);
    // Each node its own admin plane: tests run side by side, and the default port is one.
    if args.first() == Some(&"server") && !args.contains(&"--admin-listen") {
        cmd.args(["--admin-listen", &format!("127.0.0.1:{}", free_port())]);
    }
    scratch
        .isolate(&mut cmd)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    cmd
}

impl Node {
    /// Creates the stream `path`, requiring `201`.
    fn create(&self, path: &str) {
        let r = agent().put(&self.url(path)).send_empty().expect("PUT");
        assert_eq!(r.status(), 201, "PUT {path}");
    }

    /// A node ([`Node::start`]) holding the empty stream `/demo/s`.
    fn with_stream(name: &str) -> Node {
        let node = Node::start(name);
        node.create("/demo/s");
        node
    }

    fn start(name: &str) -> Node {
        Node::start_with(name, "[runtime]\ncore_count = 2\n")
    }

    /// A node on the config file `toml`.
    fn start_with(name: &str, toml: &str) -> Node {
        let scratch = Scratch::new(name);
        let config = scratch.file("ursula.toml", toml);
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let config = config.to_str().expect("utf-8 path").to_owned();
        let log = std::fs::File::create(scratch.path().join("stderr.log")).expect("log file");
        let child = ursula(
            &scratch,
            &["server", "--config", &config, "--listen", &listen],
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn the ursula binary");
        let mut node = Node {
            child,
            port,
            scratch,
        };
        node.wait_ready();
        node
    }

    fn wait_ready(&mut self) {
        let url = self.url("/__ursula/ready");
        let path = self.scratch.path().join("stderr.log");
        let log = || std::fs::read_to_string(&path).unwrap_or_default();
        wait_answering(&mut self.child, "ursula", &url, BOOT, |s| s == 200, log);
    }

    /// `GET path`, whatever its status; `what` names the request when none came.
    fn get(&self, path: &str, what: &str) -> ureq::http::Response<ureq::Body> {
        agent().get(&self.url(path)).call().expect(what)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.scratch.path().join("stderr.log")).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Sends a complete raw request (which should say `Connection: close`) and returns the
    /// status code and the whole response text.
    fn raw(&self, request: &[u8]) -> (u16, String) {
        let (status, text) = self.exchange(request, false);
        let status = status
            .unwrap_or_else(|| panic!("no response to {:?}", String::from_utf8_lossy(request)));
        (status, text)
    }

    /// Sends raw bytes, optionally half-closing so the server sees the client stop mid-request,
    /// and returns the status, if any response came, and the response text.
    fn exchange(&self, request: &[u8], half_close: bool) -> (Option<u16>, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        s.write_all(request).expect("write request");
        if half_close {
            s.shutdown(std::net::Shutdown::Write).expect("half-close");
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|t| t.get(..3))
            .and_then(|c| c.parse().ok());
        (status, text)
    }

    /// Sends a request the client abandons midway. The server must refuse it with a 4xx or close
    /// the connection without answering; never a 5xx.
    fn abandon(&self, request: &[u8]) {
        let (status, text) = self.exchange(request, true);
        if let Some(status) = status {
            assert!(
                (400..500).contains(&status),
                "an abandoned request answered {status}: {text}"
            );
            assert!(
                !text.ends_with("\r\n\r\n"),
                "the {status} has no body that says what was wrong: {text}"
            );
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn header(r: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[test]
fn the_readme_quick_start_works_against_the_binary() {
    let node = Node::start("quickstart");
    let a = agent();
    assert_eq!(
        a.put(&node.url("/demo"))
            .send_empty()
            .expect("PUT bucket")
            .status(),
        201
    );
    let r = a
        .put(&node.url("/demo/hello"))
        .send_empty()
        .expect("PUT stream");
    assert_eq!(r.status(), 201);
    let location = header(&r, "location").expect("Location");
    assert!(location.ends_with("/demo/hello"), "{location}");
    for msg in ["first message", "second message"] {
        let r = a
            .post(&node.url("/demo/hello"))
            .header("Content-Type", "application/octet-stream")
            .send(msg)
            .expect("POST");
        assert_eq!(r.status(), 204);
    }
    let mut r = node.get("/demo/hello?offset=-1", "GET");
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "stream-next-offset").as_deref(),
        Some("00000000000000000027")
    );
    assert_eq!(header(&r, "stream-up-to-date").as_deref(), Some("true"));
    assert_eq!(
        r.body_mut().read_to_string().expect("body"),
        "first messagesecond message"
    );

    // SSE: base64 data for an octet-stream, then a control event; the connection stays open.
    let r = node.get("/demo/hello?offset=-1&live=sse", "SSE");
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(
        header(&r, "stream-sse-data-encoding").as_deref(),
        Some("base64")
    );
    let mut reader = r.into_body().into_reader();
    let text = sse_through_control(&mut reader);
    let data: String = text
        .lines()
        .skip_while(|l| *l != "event: data")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.trim_start_matches("data:"))
        .collect();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("base64 data");
    assert_eq!(decoded, b"first messagesecond message");
    assert!(
        text.contains("\"streamNextOffset\":\"00000000000000000027\""),
        "{text}"
    );
    drop(reader);

    let mut r = node.get("/__ursula/metrics", "metrics");
    assert_eq!(r.status(), 200);
    let m: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().expect("body")).expect("JSON");
    assert_eq!(m["streams"], 1);
    assert_eq!(m["core_count"], 2);
}

#[test]
fn the_binary_frames_bodies_on_the_wire() {
    let node = Node::with_stream("wire");
    let a = agent();
    // A chunked append.
    let (status, _) = node.raw(
        b"POST /demo/s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    );
    assert_eq!(status, 204);
    // Bodies cut short by the client: refused, and nothing stored.
    node.abandon(
        b"POST /demo/s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
          Content-Length: 100\r\n\r\nonly ten b",
    );
    node.abandon(
        b"POST /demo/s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
          Transfer-Encoding: chunked\r\n\r\n5\r\nxy",
    );
    // Requests hyper refuses before routing: non-UTF-8 path bytes, a broken header line,
    // conflicting lengths.
    for bad in [
        &b"GET /demo/\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..],
        b"GET /demo/s HTTP/1.1\r\nHost: x\r\nBroken header\r\nConnection: close\r\n\r\n",
        b"POST /demo/s HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab",
    ] {
        let (status, text) = node.exchange(bad, false);
        assert!(status.is_none_or(|s| (400..500).contains(&s)), "{:?} answered {text}", String::from_utf8_lossy(bad));
    }
    // Only the chunked append was stored.
    let mut r = node.get("/demo/s?offset=-1", "GET");
    assert_eq!(r.body_mut().read_to_string().expect("body"), "abcde");

    // A snapshot read carries Content-Length; HEAD carries no body.
    let r = a
        .put(&node.url("/demo/s/snapshot/00000000000000000005"))
        .header("Content-Type", "text/plain")
        .send("state")
        .expect("publish");
    assert_eq!(r.status(), 204);
    let mut r = node.get("/demo/s/snapshot/00000000000000000005", "snapshot");
    assert_eq!(header(&r, "content-length").as_deref(), Some("5"));
    assert_eq!(r.body_mut().read_to_string().expect("body"), "state");
    let (status, text) = node.raw(b"HEAD /demo/s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(status, 200);
    assert!(text.ends_with("\r\n\r\n"), "HEAD sent a body: {text:?}");
    // A long-poll times out over the wire with 204.
    let r = node.get(
        "/demo/s?offset=00000000000000000005&live=long-poll&timeout_ms=50",
        "long-poll",
    );
    assert_eq!(r.status(), 204);
    assert!(header(&r, "stream-cursor").is_some());
}

#[test]
fn a_declared_oversized_append_is_refused_before_its_body_is_sent() {
    let node = Node::with_stream("oversized");
    // The client never sends the body: the 413 must come from the headers alone.
    let (status, text) = node.raw(
        b"POST /demo/s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
          Content-Length: 40000000\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 413, "{text}");
    assert!(
        text.to_lowercase()
            .contains("x-ursula-not-applied: requestbodytoolarge"),
        "{text}"
    );
    assert_eq!(
        header(
            &agent().head(&node.url("/demo/s")).call().expect("HEAD"),
            "stream-next-offset"
        )
        .as_deref(),
        Some("00000000000000000000")
    );
}

#[test]
fn the_binary_reports_the_release_its_packages_carry() {
    // One release, one number: the npm package (and the wheel, which reads it) and the binary.
    let package = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../js/package.json");
    let package: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(package).expect("js/package.json"))
            .expect("package.json is JSON");
    let release = package["version"].as_str().expect("a version");
    let scratch = Scratch::new("version");
    let out = ursula(&scratch, &["--version"])
        .output()
        .expect("run ursula");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ursula {release}")
    );
}

#[test]
fn unknown_config_keys_and_presets_stop_the_server_at_start_naming_the_problem() {
    let scratch = Scratch::new("badconfig");
    let stderr = refused_server(&scratch, "[server]\nlisen = \"127.0.0.1:1\"\n", &[]);
    assert!(stderr.contains("lisen"), "{stderr}");
    let stderr = refused_server(&scratch, "", &["--preset", "huge"]);
    assert!(stderr.contains("huge"), "{stderr}");
}

/// Runs `ursula server` on a config holding `toml`, with `extra` flags, expecting it to refuse
/// to start (exit code 2); returns its stderr.
fn refused_server(scratch: &Scratch, toml: &str, extra: &[&str]) -> String {
    let config = scratch.file("node.toml", toml);
    let mut args = vec![
        "server",
        "--config",
        config.to_str().expect("utf-8"),
        "--listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let out = ursula(scratch, &args).output().expect("run ursula");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn a_removed_config_key_stops_the_server_naming_the_key_and_its_release() {
    let scratch = Scratch::new("removedkey");
    let stderr = refused_server(&scratch, "[raft.wal]\nbackend = \"memory\"\n", &[]);
    assert!(
        stderr.contains("raft.wal.backend: removed in Ursula 0.7.0"),
        "{stderr}"
    );
}

#[test]
fn a_config_with_keys_this_build_ignores_starts_and_warns_naming_them() {
    let node = Node::start_with(
        "ignoredkeys",
        "[runtime]\ncore_count = 2\n[observability]\ntokio_console = true\n\
         [raft]\nappend_transport_budget_bytes = 1048576\n\
         [storage.snapshot]\ns3_prefix = \"snapshots\"\n",
    );
    let log = node.log();
    let warning = log
        .lines()
        .find(|l| l.contains("config keys this build does not act on"))
        .unwrap_or_else(|| panic!("no warning naming the ignored keys: {log}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        warning.ends_with(
            "observability.tokio_console, raft.append_transport_budget_bytes, storage.snapshot.s3_prefix"
        ),
        "{warning}"
    );
}

#[test]
fn a_log_written_to_a_file_is_plain_text_without_colour_codes() {
    // A key this build ignores makes the node warn at start: something to look at.
    let node = Node::start_with(
        "plainlog",
        "[runtime]\ncore_count = 2\n[observability]\ntokio_console = true\n",
    );
    let log = node.log();
    assert!(log.contains(" WARN "), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
}

#[test]
fn a_node_past_its_memory_abort_cap_aborts_and_says_why() {
    use std::os::unix::process::ExitStatusExt;
    // A cap above anything this test uses: the node serves, and the key is not "ignored".
    let node = Node::start_with(
        "memcap-high",
        "[runtime]\ncore_count = 2\nnode_memory_abort_cap_size = \"64GiB\"\n",
    );
    assert!(!node.log().contains("does not act on"), "{}", node.log());
    drop(node);
    // A cap below what a process holds at start: it aborts within a sample or two.
    let scratch = Scratch::new("memcap-low");
    let config = scratch.file(
        "ursula.toml",
        "[runtime]\ncore_count = 2\nnode_memory_abort_cap_size = \"1MiB\"\n",
    );
    let log = scratch.path().join("stderr.log");
    let mut child = ursula(
        &scratch,
        &[
            "server",
            "--config",
            config.to_str().expect("utf-8"),
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
        ],
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log"))
    .spawn()
    .expect("spawn ursula");
    let status = exit_within(&mut child, Duration::from_secs(20));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let status = status.unwrap_or_else(|| panic!("no abort within 20 s: {text}"));
    assert_eq!(status.signal(), Some(6), "{status:?}: {text}");
    assert!(
        text.contains("resident memory is past runtime.node_memory_abort_cap_size"),
        "{text}"
    );
}

/// Each core thread's `Cpus_allowed_list`, by thread name, from `/proc`.
fn core_cpus(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let dir = task.expect("task").path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !name.starts_with("ursula-core-") {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or_default();
        out.push((name.trim().to_owned(), cpus.trim().to_owned()));
    }
    out.sort();
    out
}

#[test]
fn cpu_affinity_pins_each_core_thread_to_its_own_cpu_or_leaves_them_to_the_kernel() {
    let process_cpus = std::fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| {
            l.strip_prefix("Cpus_allowed_list:")
                .map(|c| c.trim().to_owned())
        })
        .expect("Cpus_allowed_list");
    let pinned = Node::start_with(
        "affinity-on",
        "[runtime]\ncore_count = 2\ncpu_affinity = true\n",
    );
    let cores = core_cpus(pinned.child.id());
    assert_eq!(cores.len(), 2, "{cores:?}");
    for (name, cpus) in &cores {
        assert!(
            cpus.parse::<usize>().is_ok(),
            "{name} runs on one CPU: {cpus:?}"
        );
    }
    if !process_cpus.chars().all(|c| c.is_ascii_digit()) {
        assert_ne!(cores[0].1, cores[1].1, "two CPUs, one each: {cores:?}");
    }
    assert!(
        !pinned.log().contains("does not act on"),
        "{}",
        pinned.log()
    );
    drop(pinned);
    let free = Node::start_with(
        "affinity-off",
        "[runtime]\ncore_count = 2\ncpu_affinity = false\n",
    );
    for (name, cpus) in core_cpus(free.child.id()) {
        assert_eq!(
            cpus, process_cpus,
            "{name} may run wherever the process may"
        );
    }
}

#[test]
fn the_admin_listen_flag_is_checked_like_the_key() {
    let scratch = Scratch::new("adminflag");
    let stderr = refused_server(&scratch, "", &["--admin-listen", "loopback"]);
    assert!(
        stderr.contains("server.admin_listen: \"loopback\" is not an address"),
        "{stderr}"
    );
}

#[cfg(unix)]
#[test]
fn the_node_stops_cleanly_on_sigterm() {
    let mut node = Node::start("sigterm");
    let pid = node.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let status = exit_within(&mut node.child, Duration::from_secs(10))
        .expect("ursula stops within 10 s of SIGTERM");
    assert!(
        status.success(),
        "ursula exited with {status} on SIGTERM: {}",
        node.log()
    );
}
