//! `ursula-gateway`: the stateless front of an Ursula cluster, run as `ursula gateway`.
//! It forwards every request to an upstream node, follows Raft leader redirects itself, keeps
//! a node's `x-ursula-not-applied` marker only where the redirect rule allows, marks its own
//! refusals, and sets the vouch `x-ursula-not-applied-checked: 1` on every response.
//!
//! Module map:
//! - [`config`]: the flags ([`GatewayArgs`]), the checked [`GatewayConfig`], upstream URLs.
//! - [`upstreams`]: the first pick, ejection windows, learned leader routes, counters.
//! - [`forward`]: one request ([`Gateway::handle`]): body limit, forwarding, the redirect rule,
//!   marker and vouch; response bodies stream through unbuffered.
//! - [`reply`]: the gateway's own answers, refusal tokens, header hygiene.
//! - [`serve`]: the listener and [`run`].
//! - [`auth`]: opt-in access control (`--auth-*`): RFC 9068 access tokens, the issuer's JWKS,
//!   the bucket policy and its `404` concealment; [`guard`] applies it to a request, and
//!   [`expiry`] ends an SSE subscription at its token's `exp`.
//! - [`cors`]: opt-in CORS (`--cors-allowed-origin`): the one preflight answer, given before
//!   access control, and the allowed origin's headers; the nodes' own CORS headers never pass.
//!
//! Not built yet (flags of the spec this build does not take): quotas, usage logs, the
//! shared body budget, `--connect-timeout`, `--response-header-timeout` and
//! `--upstream-tcp-user-timeout` (fixed at 5 s, none, 5 s).

pub mod auth;
pub mod config;
pub mod cors;
pub mod expiry;
pub mod forward;
pub mod guard;
pub mod reply;
pub mod serve;
pub mod upstreams;

pub use config::GatewayArgs;
pub use config::GatewayConfig;
pub use forward::Gateway;
pub use reply::GatewayRefusal;
pub use serve::run;
pub use serve::serve;

/// Why the gateway could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("at least one --upstream is required")]
    NoUpstream,
    #[error("--upstream {url}: {why}")]
    BadUpstream { url: String, why: &'static str },
    #[error("--upstream {0} is given twice")]
    DuplicateUpstream(String),
    #[error("--listen {0}: not a socket address such as 127.0.0.1:8080")]
    BadListen(String),
    #[error("--max-request-body-bytes must be at least 1")]
    ZeroBodyLimit,
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Auth(#[from] auth::AuthConfigError),
    #[error(transparent)]
    Cors(#[from] cors::CorsConfigError),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}
