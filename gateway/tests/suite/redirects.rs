//! The redirect rule against scripted upstreams on loopback: which node each hop goes to,
//! when the marker survives, the gateway's own `503`s and `413`, and the vouch on all of them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::Request;
use http::Response;
use http::StatusCode;
use http_body_util::BodyExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use ursula_gateway::Gateway;
use ursula_gateway::GatewayArgs;
use ursula_gateway::GatewayConfig;

const MARKER: &str = "x-ursula-not-applied";
const VOUCH: &str = "x-ursula-not-applied-checked";

/// What a scripted node answers: status, `Location`, marker.
#[derive(Clone)]
enum Script {
    Ok,
    /// A `307` to this URL base, marked or not.
    Redirect(String, bool),
    /// A marked admission refusal.
    Refuse(&'static str),
}

struct Node {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    paths: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Node {
    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.expect("bind")
}

fn start(l: TcpListener, script: Script) -> Node {
    let addr = l.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (h, p) = (hits.clone(), paths.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = l.accept().await else {
                return;
            };
            let (script, h, p) = (script.clone(), h.clone(), p.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let (script, h, p) = (script.clone(), h.clone(), p.clone());
                    async move {
                        h.fetch_add(1, Ordering::SeqCst);
                        let target = req.uri().to_string();
                        p.lock().expect("paths").push(target.clone());
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let mut resp = Response::new(Full::new(body.unwrap_or_default()));
                        match script {
                            Script::Ok => {}
                            Script::Redirect(base, marked) => {
                                *resp.status_mut() = StatusCode::TEMPORARY_REDIRECT;
                                let loc = format!("{base}{target}");
                                resp.headers_mut()
                                    .insert("location", loc.parse().expect("location"));
                                if marked {
                                    resp.headers_mut()
                                        .insert(MARKER, "NotLeader".parse().expect("marker"));
                                }
                            }
                            Script::Refuse(token) => {
                                *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                                resp.headers_mut()
                                    .insert(MARKER, token.parse().expect("marker"));
                            }
                        }
                        // A node never vouches; the gateway must drop a copy if one came.
                        resp.headers_mut()
                            .insert(VOUCH, "bogus".parse().expect("v"));
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Node { addr, hits, paths }
}

fn gateway(upstreams: &[String], limit: u64) -> Gateway {
    let args = GatewayArgs {
        upstreams: upstreams.to_vec(),
        listen: "127.0.0.1:0".into(),
        uploads: ursula_gateway::uploads::UploadArgs {
            max_request_body_bytes: limit,
            ..Default::default()
        },
        timeouts: Default::default(),
        auth: Default::default(),
        tenants: Default::default(),
        cors: Default::default(),
    };
    Gateway::new(GatewayConfig::from_args(&args).expect("config")).expect("gateway")
}

/// An answer's status, marker and vouch.
type Answer = (StatusCode, Option<String>, Option<String>);

async fn post(gw: &Gateway, body: &'static [u8]) -> Answer {
    let req = Request::builder()
        .method("POST")
        .uri("/demo/s?x=1")
        .header("content-length", body.len())
        .body(Full::new(Bytes::from_static(body)))
        .expect("request");
    let resp = gw.handle(req).await;
    let get = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (marker, vouch) = (get(MARKER), get(VOUCH));
    (resp.status(), marker, vouch)
}

/// A closed port: nothing listens there.
async fn dead_base() -> String {
    let l = listener().await;
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("http://{addr}")
}

/// A POST through a gateway in front of `a` and `b`, where `a` redirects to `b` (the redirect
/// `marked` or not) and `b` refuses with a marked `RaftLogPressure`. Returns `b` and the answer.
async fn redirected_to_a_refusal(marked: bool) -> (Node, Answer) {
    let (la, lb) = (listener().await, listener().await);
    let b_base = format!("http://{}", lb.local_addr().expect("addr"));
    let a = start(la, Script::Redirect(b_base, marked));
    let b = start(lb, Script::Refuse("RaftLogPressure"));
    let gw = gateway(&[a.base(), b.base()], 1024);
    let answer = post(&gw, b"x").await;
    (b, answer)
}

#[tokio::test]
async fn a_marked_redirect_keeps_the_leaders_marker_with_the_vouch() {
    let (b, (status, marker, vouch)) = redirected_to_a_refusal(true).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(marker.as_deref(), Some("RaftLogPressure"));
    assert_eq!(vouch.as_deref(), Some("1"));
    assert_eq!(b.paths.lock().expect("paths").as_slice(), ["/demo/s?x=1"]);
}

#[tokio::test]
async fn an_unmarked_redirect_drops_the_final_marker() {
    let (_b, (status, marker, vouch)) = redirected_to_a_refusal(false).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(marker, None);
    assert_eq!(vouch.as_deref(), Some("1"));
}

#[tokio::test]
async fn a_redirect_cycle_ends_in_leader_not_found_marked_only_if_every_redirect_was() {
    for marked in [true, false] {
        let (la, lb) = (listener().await, listener().await);
        let (a_base, b_base) = (
            format!("http://{}", la.local_addr().expect("addr")),
            format!("http://{}", lb.local_addr().expect("addr")),
        );
        let a = start(la, Script::Redirect(b_base, marked));
        let b = start(lb, Script::Redirect(a_base, true));
        let gw = gateway(&[a.base(), b.base()], 1024);
        let (status, marker, vouch) = post(&gw, b"x").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let expected = marked.then_some("LeaderNotFound");
        assert_eq!(marker.as_deref(), expected);
        assert_eq!(vouch.as_deref(), Some("1"));
        // b's redirect names a, already tried, and no upstream is left untried.
        let total = a.hits() + b.hits();
        assert_eq!(total, 2);
    }
}

#[tokio::test]
async fn at_most_three_hops_follow_the_first_redirect() {
    let ls: Vec<TcpListener> = listeners(6).await;
    let bases: Vec<String> = ls
        .iter()
        .map(|l| format!("http://{}", l.local_addr().expect("addr")))
        .collect();
    let nodes: Vec<Node> = ls
        .into_iter()
        .enumerate()
        .map(|(i, l)| start(l, Script::Redirect(bases[(i + 1) % 6].clone(), true)))
        .collect();
    let gw = gateway(&bases, 1024);
    let (status, marker, _) = post(&gw, b"x").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(marker.as_deref(), Some("LeaderNotFound"));
    let hits: usize = nodes.iter().map(Node::hits).sum();
    assert_eq!(hits, 4, "the first attempt and three hops");
}

async fn listeners(n: usize) -> Vec<TcpListener> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(listener().await);
    }
    v
}

#[tokio::test]
async fn a_redirect_to_an_unknown_address_tries_the_next_upstreams_in_order() {
    let (la, lb, lc) = (listener().await, listener().await, listener().await);
    let a = start(la, Script::Ok);
    let b = start(lb, Script::Redirect("http://127.0.0.9:1".into(), true));
    let c = start(lc, Script::Ok);
    let gw = gateway(&[a.base(), b.base(), c.base()], 1024);
    // Round-robin: the first request starts at a, the second at b.
    assert_eq!(post(&gw, b"x").await.0, StatusCode::OK);
    let (status, marker, vouch) = post(&gw, b"x").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(marker, None);
    assert_eq!(vouch.as_deref(), Some("1"));
    assert_eq!(
        (a.hits(), b.hits(), c.hits()),
        (1, 1, 1),
        "b redirected to c"
    );
}

#[tokio::test]
async fn an_unreachable_first_upstream_is_a_marked_503() {
    let gw = gateway(&[dead_base().await], 1024);
    let (status, marker, vouch) = post(&gw, b"x").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(marker.as_deref(), Some("UpstreamUnreachable"));
    assert_eq!(vouch.as_deref(), Some("1"));
}

#[tokio::test]
async fn an_unreachable_redirect_target_is_marked_only_after_marked_redirects() {
    for marked in [true, false] {
        let dead = dead_base().await;
        let a = start(listener().await, Script::Redirect(dead.clone(), marked));
        let gw = gateway(&[a.base(), dead], 1024);
        let (status, marker, vouch) = post(&gw, b"x").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(marker.as_deref(), marked.then_some("UpstreamUnreachable"));
        assert_eq!(vouch.as_deref(), Some("1"));
    }
}

#[tokio::test]
async fn an_oversized_body_is_refused_marked_and_never_forwarded() {
    let a = start(listener().await, Script::Ok);
    let gw = gateway(&[a.base()], 4);
    let (status, marker, vouch) = post(&gw, b"12345").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(marker.as_deref(), Some("RequestBodyTooLarge"));
    assert_eq!(vouch.as_deref(), Some("1"));
    assert_eq!(a.hits(), 0);
    let (status, _, vouch) = post(&gw, b"1234").await;
    assert_eq!(status, StatusCode::OK, "at the limit passes");
    assert_eq!(vouch.as_deref(), Some("1"));
}

#[tokio::test]
async fn the_gateway_serves_its_own_metrics() {
    let a = start(listener().await, Script::Ok);
    let gw = gateway(&[a.base()], 1024);
    let req = Request::builder()
        .uri("/__ursula/gateway/metrics")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = gw.handle(req).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().contains_key(VOUCH));
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(v["upstream_ejected"], 0);
    assert_eq!(a.hits(), 0);
}
