//! The refusal table: what fails a commit alone, what poisons the file, what fences it.
//! Each test runs in its own process (nextest), so the env settings it sets apply to it alone.

use rusqlite::Connection;
use ursula_vfs_tests::owner::Owner;
use ursula_vfs_tests::proxy::Action;
use ursula_vfs_tests::proxy::Canned;
use ursula_vfs_tests::proxy::Proxy;
use ursula_vfs_tests::server::Server;
use ursula_vfs_tests::sqlite::attach;
use ursula_vfs_tests::sqlite::bodies;
use ursula_vfs_tests::sqlite::code;

const IOERR_AUTH: i32 = 7178;
const IOERR_WRITE: i32 = 778;

/// An attached database behind the proxy, with a `notes` table committed.
struct Rig {
    o: Owner,
    proxy: Proxy,
    _server: Server,
}

/// Sets the retry budget (`URSULA_VFS_RETRY_MS`) of this test's process.
fn retry_budget(ms: u64) {
    // SAFETY of set_var: each nextest test is its own process, set before any thread reads it.
    unsafe { std::env::set_var("URSULA_VFS_RETRY_MS", ms.to_string()) };
}

fn rig(retry_ms: u64) -> Rig {
    retry_budget(retry_ms);
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let o = Owner::attach(&format!("{}/demo/refusals", proxy.base()));
    Rig {
        o,
        proxy,
        _server: server,
    }
}

impl Rig {
    fn insert(&self, body: &str) -> rusqlite::Result<usize> {
        self.o.insert(body)
    }

    fn status(&self) -> serde_json::Value {
        self.o.status()
    }

    /// The next `times` appends (all of them: `None`) get `action`.
    fn on_append(&self, action: Action, times: Option<usize>) {
        self.proxy.add("POST", "/", action, times);
    }

    /// The next `times` appends (all of them: `None`) are answered with `status`, `headers`
    /// and `body`, unforwarded.
    fn answer_appends(
        &self,
        status: u16,
        headers: &[(&str, &str)],
        body: &str,
        times: Option<usize>,
    ) {
        self.on_append(Action::Respond(Canned::new(status, headers, body)), times);
    }
}

/// The headers of a refusal vouched as never applied, for `reason`.
fn not_applied(reason: &str) -> [(&str, &str); 2] {
    [
        ("x-ursula-not-applied", reason),
        ("x-ursula-not-applied-checked", "1"),
    ]
}

#[test]
fn payment_required_fails_the_commit_alone_and_the_next_one_succeeds() {
    let r = rig(5_000);
    r.answer_appends(402, &[], "quota exhausted", None);
    let started = std::time::Instant::now();
    let err = r.insert("refused").expect_err("402 refuses");
    assert_eq!(code(&err), IOERR_AUTH, "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "402 is not retried"
    );
    let st = r.status();
    assert_eq!(st["payment_required"], true, "{st}");
    assert_eq!(st["payment_reason"], "quota exhausted");
    assert_eq!(st["refused_kind"], "payment_required");
    assert_eq!(st["poisoned"], false);
    assert_eq!(st["error"]["action"], "retry");
    assert!(
        bodies(&r.o.db).is_empty(),
        "the refused row is rolled back, reads work"
    );
    r.proxy.clear();
    r.insert("accepted")
        .expect("next commit goes through without a reattach");
    let st = r.status();
    assert_eq!(st["payment_required"], false);
    assert_eq!(st["writes_refused"], false);
    assert_eq!(bodies(&r.o.db), vec!["accepted"]);
}

#[test]
fn long_refusal_bodies_are_cut_to_256_bytes() {
    let r = rig(2_000);
    r.answer_appends(402, &[], &"q".repeat(1000), None);
    r.insert("x").expect_err("refused");
    let reason = r.status()["payment_reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(reason, format!("{}...", "q".repeat(256)));
}

#[test]
fn rate_limiting_is_retried_then_fails_alone() {
    let r = rig(1_000);
    r.answer_appends(429, &[], "slow down", None);
    let err = r.insert("x").expect_err("429 until the budget is spent");
    assert_eq!(code(&err), IOERR_AUTH);
    let st = r.status();
    assert_eq!(st["refused_kind"], "rate_limited", "{st}");
    assert!(st["append_retries"].as_u64().unwrap_or(0) > 0, "{st}");
    assert_eq!(st["poisoned"], false);
}

#[test]
fn a_vouched_not_applied_503_fails_alone_but_a_bare_marker_poisons() {
    let r = rig(800);
    r.answer_appends(503, &not_applied("RaftLogPressure"), "", Some(100));
    let err = r.insert("x").expect_err("refused");
    assert_eq!(code(&err), IOERR_AUTH);
    let st = r.status();
    assert_eq!(st["refused_kind"], "not_applied", "{st}");
    assert_eq!(st["refused_reason"], "RaftLogPressure");
    r.proxy.clear();
    r.answer_appends(
        503,
        &[("x-ursula-not-applied", "RaftLogPressure")],
        "",
        None,
    );
    let err = r.insert("y").expect_err("an unvouched 503 proves nothing");
    assert_eq!(code(&err), IOERR_WRITE);
    let st = r.status();
    assert_eq!(st["poisoned"], true, "{st}");
    assert_eq!(st["error"]["kind"], "outcome_unknown");
    assert_eq!(st["error"]["action"], "reattach");
    r.proxy.clear();
    assert_eq!(
        code(&r.insert("z").expect_err("poisoned until reattached")),
        IOERR_WRITE
    );
}

#[test]
fn forbidden_with_both_headers_fails_alone_and_without_them_poisons_unfenced() {
    let r = rig(500);
    r.answer_appends(403, &not_applied("Forbidden"), "denied", Some(1));
    assert_eq!(code(&r.insert("x").expect_err("refused")), IOERR_AUTH);
    assert_eq!(r.status()["refused_kind"], "forbidden");
    r.answer_appends(403, &[], "denied", Some(1));
    assert_eq!(code(&r.insert("y").expect_err("poisoned")), IOERR_WRITE);
    let st = r.status();
    assert_eq!(st["poisoned"], true);
    assert_eq!(st["fenced"], false, "{st}");
}

#[test]
fn a_marked_413_is_too_large_and_the_file_stays_usable() {
    let r = rig(500);
    r.answer_appends(413, &not_applied("RequestBodyTooLarge"), "", Some(1));
    assert_eq!(code(&r.insert("x").expect_err("refused")), IOERR_AUTH);
    let st = r.status();
    assert_eq!(st["refused_kind"], "too_large");
    assert_eq!(st["error"]["action"], "fix");
    r.insert("fits").expect("next commit succeeds");
}

#[test]
fn an_answer_dropped_once_is_retried_with_the_same_seq_and_lands_once() {
    let r = rig(5_000);
    r.on_append(Action::ForwardThenDrop, Some(1));
    r.insert("once")
        .expect("the retry is answered as a duplicate of the applied attempt");
    assert_eq!(bodies(&r.o.db), vec!["once"]);
    let st = r.status();
    assert!(st["append_retries"].as_u64().unwrap_or(0) >= 1, "{st}");
    // A rebuild from the stream holds the row exactly once.
    assert_eq!(bodies(&r.o.rebuild("copy.db")), vec!["once"]);
}

#[test]
fn answers_dropped_for_the_whole_budget_poison_and_the_commit_is_there_after_reattach() {
    let r = rig(600);
    r.on_append(Action::ForwardThenDrop, None);
    assert_eq!(
        code(&r.insert("maybe").expect_err("unknown outcome")),
        IOERR_WRITE
    );
    let st = r.status();
    assert_eq!(st["error"]["kind"], "outcome_unknown", "{st}");
    r.proxy.clear();
    drop(r.o.db);
    attach(&r.o.ctl, &r.o.path, &r.o.url).expect("reattach");
    let db = Connection::open(&r.o.path).expect("open");
    assert_eq!(bodies(&db), vec!["maybe"], "the append was applied");
}

#[test]
fn a_refusal_that_was_applied_after_all_poisons_the_next_commit() {
    let r = rig(300);
    r.on_append(
        Action::ForwardThenRespond(Canned::new(429, &[], "lying layer")),
        None,
    );
    assert_eq!(code(&r.insert("ghost").expect_err("refused")), IOERR_AUTH);
    r.proxy.clear();
    let err = r
        .insert("next")
        .expect_err("the free seq turns out to be taken");
    assert_eq!(code(&err), IOERR_WRITE);
    let reason = r.status()["reason"].as_str().unwrap_or_default().to_owned();
    assert!(
        reason.starts_with("a commit refused as never applied may have been applied after all"),
        "{reason}"
    );
}

#[test]
fn a_307_is_retried_and_a_308_poisons_naming_the_location() {
    let r = rig(400);
    r.answer_appends(
        308,
        &[("location", "https://elsewhere.invalid/x")],
        "",
        Some(1),
    );
    assert_eq!(code(&r.insert("x").expect_err("redirect")), IOERR_WRITE);
    let st = r.status();
    assert_eq!(st["error"]["kind"], "invalid_url", "{st}");
    assert!(
        st["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("https://elsewhere.invalid/x")
    );
}

#[test]
fn an_https_url_to_a_plain_http_server_is_refused_with_a_hint_to_use_http() {
    retry_budget(300);
    let server = Server::start();
    let url = format!("https://127.0.0.1:{}/demo/tls", server.port);
    let ctl = ursula_vfs_tests::sqlite::control();
    let dir = tempfile::tempdir().expect("tempdir");
    let err =
        attach(&ctl, &dir.path().join("a.db"), &url).expect_err("no TLS on a plain-HTTP server");
    let text = err.to_string();
    assert!(text.contains("InvalidContentType"), "{text}");
    assert!(
        text.contains("use an http:// URL for a server without TLS"),
        "{text}"
    );
}

#[test]
fn a_stopped_endpoint_fails_the_commit_alone_as_unreachable() {
    retry_budget(500);
    let mut server = Server::start();
    let o = Owner::attach(&server.url("/demo/unreachable"));
    server.stop();
    assert_eq!(code(&o.insert("x").expect_err("no server")), IOERR_AUTH);
    let st = o.status();
    assert_eq!(st["refused_kind"], "unreachable", "{st}");
    assert!(
        st["refused_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("refused"),
        "{st}"
    );
    assert_eq!(st["poisoned"], false);
}

#[test]
fn persistent_307s_are_retried_for_the_budget_then_poison() {
    let r = rig(500);
    r.answer_appends(307, &[("location", &r.o.url)], "", None);
    let started = std::time::Instant::now();
    assert_eq!(code(&r.insert("x").expect_err("redirects")), IOERR_WRITE);
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(300),
        "retried within the budget"
    );
    assert!(r.proxy.count("POST") > 2, "sent again to the same URL");
    assert_eq!(r.status()["error"]["kind"], "outcome_unknown");
}
