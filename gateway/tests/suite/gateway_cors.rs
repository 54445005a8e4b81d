//! `ursula gateway --cors-allowed-origin` in front of a real `ursula server` whose own answers
//! carry permissive CORS headers: without the flag none of them reaches the client; with it a
//! listed origin gets `Access-Control-Allow-Origin` and `Access-Control-Expose-Headers: *` and
//! an unlisted one nothing; the preflight is one answer for every path, given before access
//! control; and a real browser (Debian's `chromium`, headless) on another loopback origin reads
//! a `public_read` stream with `EventSource` and a private one with `fetch` + `Authorization`
//! only when its origin is allowed.

use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::io::Write;
use std::net::TcpListener;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use crate::harness::auth::*;
use crate::harness::gateway::*;
use crate::harness::seeded::seeded;
use crate::harness::startup::refused_gateway;

const APP: &str = "http://app.example:8080";
const OTHER: &str = "http://other.example";

/// The `access-control-*` headers of an answer.
fn cors_headers(a: &Answer) -> Vec<(String, String)> {
    a.headers
        .iter()
        .filter(|(k, _)| k.starts_with("access-control-"))
        .cloned()
        .collect()
}

fn origin(o: &str) -> [(&str, &str); 1] {
    [("origin", o)]
}

#[test]
fn without_the_flag_no_cors_header_reaches_the_client_though_the_node_sends_them() {
    let (scratch, issuer, node) = seeded("cors-off");
    // The premise: the node answers every request, preflights included, with CORS headers.
    let direct = send("GET", &node.url("/public/s?offset=-1"), &origin(APP), b"");
    assert_eq!(direct.header("access-control-allow-origin"), Some("*"));
    let preflight = [
        ("origin", APP),
        ("access-control-request-method", "POST"),
        ("access-control-request-headers", "authorization"),
    ];
    let direct = send("OPTIONS", &node.url("/public/s"), &preflight, b"");
    assert!(direct.header("access-control-allow-methods").is_some());

    let plain = gateway(&scratch, "plain", &[node.base()], &[]);
    let guarded = auth_gateway(&scratch, &node, &issuer.url, &[]);
    let owner = bearer(&token(&issuer.url, OWNER));
    let with_token = [("origin", APP), ("authorization", owner.as_str())];
    for gw in [&plain, &guarded] {
        let answers = [
            send("GET", &gw.url("/public/s?offset=-1"), &origin(APP), b""),
            send("GET", &gw.url("/private/s?offset=-1"), &with_token, b""),
            send("GET", &gw.url("/private/nope?offset=-1"), &with_token, b""),
            send("GET", &gw.url("/private/s?offset=-1"), &origin(APP), b""),
            send(
                "POST",
                &gw.url("/private/s"),
                &[TEXT, with_token[0], with_token[1]],
                b"x|",
            ),
            send("OPTIONS", &gw.url("/public/s"), &preflight, b""),
            send(
                "GET",
                &gw.url("/__ursula/gateway/metrics"),
                &origin(APP),
                b"",
            ),
        ];
        for (i, a) in answers.iter().enumerate() {
            assert!(
                cors_headers(a).is_empty(),
                "answer #{i} of {}: {:?}",
                gw.base(),
                a.headers
            );
            assert!(a.vouched());
        }
        assert_eq!(answers[0].status, 200);
        assert_eq!(answers[1].status, 200);
        assert_eq!(answers[2].status, 404);
    }
    // Without the flag an `OPTIONS` keeps its old way: forwarded without access control, a
    // write with it (the concealment 404 for an anonymous caller).
    for (gw, status) in [(&plain, 204), (&guarded, 404)] {
        let a = send("OPTIONS", &gw.url("/public/s"), &preflight, b"");
        assert_eq!(a.status, status, "OPTIONS through {}", gw.base());
    }
}

#[test]
fn a_listed_origin_gets_its_origin_and_exposure_and_an_unlisted_one_gets_nothing() {
    let g = guarded(
        "cors-on",
        &[
            "--cors-allowed-origin",
            APP,
            "--cors-allowed-origin",
            "https://studio.example",
        ],
    );
    let (scratch, issuer, node, gw) = (&g.scratch, &g.issuer, &g.node, &g.gw);
    let owner = bearer(&token(&issuer.url, OWNER));
    let cases = [
        ("/public/s?offset=-1", None, 200),
        ("/private/s?offset=-1", Some(owner.as_str()), 200),
        ("/private/nope?offset=-1", Some(owner.as_str()), 404),
        ("/private/s?offset=-1", None, 404),
        ("/private/s?offset=-1", Some("Bearer junk"), 401),
        ("/__ursula/metrics", None, 404),
    ];
    for (path, auth, status) in cases {
        let mut hs = vec![("origin", APP)];
        hs.extend(auth.map(|a| ("authorization", a)));
        let a = send("GET", &gw.url(path), &hs, b"");
        assert_eq!(a.status, status, "{path}: {}", a.body);
        assert_eq!(
            cors_headers(&a),
            vec![
                ("access-control-allow-origin".to_owned(), APP.to_owned()),
                ("access-control-expose-headers".to_owned(), "*".to_owned()),
            ],
            "{path} as {auth:?}"
        );
        assert_eq!(a.header("vary"), Some("Origin"), "{path}");
        assert!(a.vouched());

        for stranger in [OTHER, "http://app.example:8081", "null"] {
            hs[0] = ("origin", stranger);
            let a = send("GET", &gw.url(path), &hs, b"");
            assert_eq!(a.status, status, "{path}");
            assert!(
                cors_headers(&a).is_empty(),
                "{path} from {stranger}: {:?}",
                a.headers
            );
            assert_eq!(a.header("vary"), Some("Origin"), "{path}");
        }
    }

    // The concealment 404 stays the 404 of a missing stream, for an allowed origin too.
    let as_owner = [("origin", APP), ("authorization", owner.as_str())];
    let missing = raw_with(gw.port, "GET", "/private/nope", &as_owner, b"");
    assert!(
        missing.contains(&format!("access-control-allow-origin: {APP}")),
        "{missing}"
    );
    for (path, hs) in [
        ("/private/s", &[("origin", APP)][..]),
        ("/unknown/s", &[("origin", APP)][..]),
        ("/__ursula/metrics", &as_owner[..]),
    ] {
        assert_eq!(raw_with(gw.port, "GET", path, hs, b""), missing, "{path}");
    }

    let any = auth_gateway(scratch, node, &issuer.url, &["--cors-allowed-origin", "*"]);
    let a = send("GET", &any.url("/public/s?offset=-1"), &origin(OTHER), b"");
    assert_eq!(a.header("access-control-allow-origin"), Some("*"));
    assert_eq!(a.header("access-control-expose-headers"), Some("*"));
    assert_eq!(a.header("vary"), None);
    let a = send("GET", &any.url("/public/s?offset=-1"), &[], b"");
    assert!(
        cors_headers(&a).is_empty(),
        "no Origin, no CORS: {:?}",
        a.headers
    );
}

#[test]
fn the_preflight_is_one_answer_for_every_path_given_before_access_control() {
    let g = guarded("cors-preflight", &["--cors-allowed-origin", APP]);
    let (node, gw) = (&g.node, &g.gw);
    let paths = [
        "/public/s",
        "/private/s",
        "/unknown/s",
        "/__ursula/metrics",
        "/__ursula/gateway/metrics",
    ];
    for (from, allowed) in [(APP, true), (OTHER, false)] {
        let ask = [
            ("origin", from),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization,content-type",
            ),
        ];
        let first = raw_with(gw.port, "OPTIONS", paths[0], &ask, b"");
        assert!(first.starts_with("HTTP/1.1 204 "), "{first}");
        for path in &paths[1..] {
            assert_eq!(
                raw_with(gw.port, "OPTIONS", path, &ask, b""),
                first,
                "{path} from {from}"
            );
        }
        let a = send("OPTIONS", &gw.url("/private/s"), &ask, b"");
        assert!(a.vouched());
        assert_eq!(a.header("access-control-allow-credentials"), None);
        if allowed {
            assert_eq!(a.header("access-control-allow-origin"), Some(APP));
            assert_eq!(
                a.header("access-control-allow-methods"),
                Some("GET, HEAD, POST, PUT, DELETE")
            );
            assert_eq!(
                a.header("access-control-allow-headers"),
                Some("authorization,content-type")
            );
            assert_eq!(a.header("access-control-max-age"), Some("7200"));
        } else {
            assert!(cors_headers(&a).is_empty(), "{from}: {:?}", a.headers);
        }
    }
    // A preflight never reaches the node, nor a policy decision: no token needed, a junk one
    // not even looked at.
    let junk = [
        ("origin", APP),
        ("access-control-request-method", "DELETE"),
        ("authorization", "Bearer junk"),
    ];
    let a = send("OPTIONS", &gw.url("/private/s"), &junk, b"");
    assert_eq!(a.status, 204);
    assert_eq!(contents(node, "/private/s"), "hello|");
}

#[test]
fn a_bad_allowed_origin_stops_the_gateway_at_startup() {
    for (bad, why) in [
        ("https://app.example/", "no path"),
        ("app.example", "not an origin"),
        ("null", "never allowed"),
    ] {
        let err = refused_gateway(&["--cors-allowed-origin", bad]);
        assert!(
            err.contains("--cors-allowed-origin") && err.contains(why),
            "{err}"
        );
    }
    let err = refused_gateway(&["--cors-allowed-origin", "*", "--cors-allowed-origin", APP]);
    assert!(err.contains("cannot be combined"), "{err}");
}

// --- In a real browser -------------------------------------------------------------------

/// `chromium` on `PATH`: the test fails without it, since skipping would hide that nothing was
/// checked (`.ci/run` installs Debian's package).
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("chromium is not on PATH: install it (apt-get install -y chromium) to run the browser test")
        })
}

/// The page: reads `public/s` with `EventSource` and `private/s` with `fetch` and a bearer
/// token (the gateway and the token come in the query string), then posts what it saw to
/// `/report` on its own origin.
const PAGE: &str = r#"<!doctype html><meta charset="utf-8"><title>cors</title><script>
const q = new URLSearchParams(location.search);
const GW = q.get("gw"), TOKEN = q.get("token");
const out = {};
const done = () => {
  if ("sse" in out && "fetch" in out) {
    fetch("/report", { method: "POST", body: JSON.stringify(out) });
  }
};
const es = new EventSource(GW + "/public/s?offset=-1&live=sse");
const settle = (what) => { if (!("sse" in out)) { es.close(); out.sse = what; done(); } };
es.addEventListener("data", (e) => settle("data:" + e.data));
es.onerror = () => settle("error");
setTimeout(() => settle("timeout"), 10000);
fetch(GW + "/private/s?offset=-1", { headers: { Authorization: "Bearer " + TOKEN } })
  .then(async (r) => {
    out.fetch = { status: r.status, body: await r.text(), next: r.headers.get("stream-next-offset") };
    done();
  })
  .catch((e) => { out.fetch = { error: String(e) }; done(); });
</script>"#;

/// Serves `html` at `/` on a loopback port of its own (another origin than the gateway's) and
/// hands what the page posts to `/report` to the receiver.
fn page_server() -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || serve_page(conn, &tx));
        }
    });
    (port, rx)
}

fn serve_page(conn: TcpStream, tx: &mpsc::Sender<String>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut conn = conn;
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let target = line.split(' ').nth(1).unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default().to_owned();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        match reader.read_line(&mut h) {
            Ok(0) | Err(_) => return,
            Ok(_) if h.trim().is_empty() => break,
            Ok(_) => {
                if let Some((k, v)) = h.split_once(':')
                    && k.trim().eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let (status, ctype, text) = match path.as_str() {
        "/" => ("200 OK", "text/html; charset=utf-8", PAGE.to_owned()),
        "/report" => {
            let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
            ("200 OK", "text/plain", String::new())
        }
        _ => ("404 Not Found", "text/plain", String::new()),
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// Opens the page (served on `page_port`, reporting to `reports`) in headless Chromium and
/// returns what it reported, killing the browser (its whole process group) either way.
fn browse(
    scratch: &Scratch,
    name: &str,
    (page_port, reports): &(u16, mpsc::Receiver<String>),
    gateway: &str,
    token: &str,
) -> serde_json::Value {
    use std::os::unix::process::CommandExt;
    let profile = scratch.path().join(format!("chromium-{name}"));
    let log = scratch.path().join(format!("chromium-{name}.log"));
    let mut browser = Command::new(chromium())
        .args(["--headless=new", "--no-sandbox", "--disable-gpu"])
        .args(["--disable-dev-shm-usage", "--no-first-run"])
        .arg("--no-default-browser-check")
        .arg(format!("--user-data-dir={}", profile.display()))
        // Without /dev/shm its shared memory files go to the temp dir, and a killed browser
        // leaves them there: the scratch directory takes them instead.
        .env("TMPDIR", scratch.path())
        .arg(format!(
            "http://127.0.0.1:{page_port}/?gw={gateway}&token={token}"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .process_group(0)
        .spawn()
        .expect("spawn chromium");
    let report = reports.recv_timeout(Duration::from_secs(25));
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", browser.id())])
        .status();
    let _ = browser.wait();
    let report = report.unwrap_or_else(|_| {
        panic!(
            "the page reported nothing within 25 s; chromium said: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    serde_json::from_str(&report).unwrap_or_else(|e| panic!("report {report:?}: {e}"))
}

#[test]
fn a_browser_on_an_allowed_origin_reads_public_and_private_streams_and_elsewhere_cannot() {
    let (scratch, issuer, node) = seeded("cors-browser");
    let owner = token(&issuer.url, OWNER);
    let page = page_server();
    let page_origin = format!("http://127.0.0.1:{}", page.0);

    let listed = auth_gateway(
        &scratch,
        &node,
        &issuer.url,
        &[
            "--cors-allowed-origin",
            OTHER,
            "--cors-allowed-origin",
            &page_origin,
        ],
    );
    let seen = browse(&scratch, "allowed", &page, &listed.base(), &owner);
    assert_eq!(seen["sse"], "data:hello|", "{seen}");
    assert_eq!(seen["fetch"]["status"], 200, "{seen}");
    assert_eq!(seen["fetch"]["body"], "hello|", "{seen}");
    assert!(
        seen["fetch"]["next"]
            .as_str()
            .is_some_and(|n| !n.is_empty()),
        "stream-next-offset is not exposed: {seen}"
    );

    // The premise of the last case: the node's own CORS headers would let the page read.
    let seen = browse(&scratch, "node", &page, &node.base(), &owner);
    assert_eq!(seen["sse"], "data:hello|", "{seen}");
    assert_eq!(seen["fetch"]["status"], 200, "{seen}");

    // Another origin listed, not the page's: the node's own `*` must not leak through.
    let elsewhere = auth_gateway(
        &scratch,
        &node,
        &issuer.url,
        &["--cors-allowed-origin", OTHER],
    );
    let seen = browse(&scratch, "denied", &page, &elsewhere.base(), &owner);
    assert_eq!(seen["sse"], "error", "{seen}");
    assert!(seen["fetch"]["error"].is_string(), "{seen}");
}
