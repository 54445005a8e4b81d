//! `ursula-gateway`: the stateless front of an Ursula cluster, run as `ursula gateway`.
//! It forwards every request to an upstream node, follows Raft leader redirects itself, keeps
//! a node's `x-ursula-not-applied` marker only where the redirect rule allows, marks its own
//! refusals, and sets the vouch `x-ursula-not-applied-checked: 1` on every response.
//!
//! Module map:
//! - [`config`]: the flags ([`GatewayArgs`]), the checked [`GatewayConfig`], upstream URLs.
//! - [`uploads`]: the body flags, the checked [`uploads::UploadLimits`], and the shared body
//!   budget every body reserves its size from before it is read.
//! - [`timeouts`]: upstream and listener timeout flags, the connection cap, durations.
//! - [`body`]: reading a body to forward it (budget share, stall, minimum rate), and draining
//!   the body of a request refused without it.
//! - [`upstreams`]: the first pick, ejection windows, learned leader routes, counters.
//! - [`forward`]: one request ([`Gateway::handle`]): body, forwarding, the redirect rule,
//!   marker and vouch, the response-header timeout, metrics; response bodies stream through
//!   unbuffered.
//! - [`reply`]: the gateway's own answers, refusal tokens, header hygiene.
//! - [`serve`]: the listener (request-head timeout, connection cap, HTTP/1.1 or h2c by the
//!   first bytes) and [`run`]; [`h2c`]: a connection upgraded to HTTP/2 from HTTP/1.1.
//! - [`auth`]: opt-in access control (`--auth-*`): RFC 9068 access tokens, the issuer's JWKS,
//!   the bucket policy and its `404` concealment; [`guard`] applies it to a request, and
//!   [`expiry`] ends an SSE subscription at its token's `exp`.
//! - [`tenant`]: per-tenant limits and usage around one request (`--quota-policy`,
//!   `--usage-*`): [`admission`] holds the quota policy and the shares a request takes (rate,
//!   live reads, uploads), [`usage`] the usage ledger and its JSONL log.
//! - [`untrusted`]: requests not admitted for a principal: the client address the listener
//!   records, and the per-address count of their bodies being read.
//! - [`cors`]: opt-in CORS (`--cors-allowed-origin`): the one preflight answer, given before
//!   access control, and the allowed origin's headers; the nodes' own CORS headers never pass.
//!
//! Dependencies run one way: `forward` uses `body`, which uses `uploads`; `config` uses
//! `uploads` and `timeouts`; `uploads` takes only the duration parser from `timeouts`;
//! `tenant` uses `admission` and `usage`, and `forward` uses `tenant` and `cors`; `serve` uses
//! `forward` and `h2c`; `auth` takes only the error formatter of `reply`.

pub mod admission;
pub mod auth;
pub mod body;
pub mod config;
pub mod cors;
pub mod expiry;
pub mod forward;
pub mod guard;
pub mod h2c;
pub mod reply;
pub mod serve;
pub mod tenant;
pub mod timeouts;
pub mod untrusted;
pub mod uploads;
pub mod upstreams;
pub mod usage;

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
    #[error(transparent)]
    Uploads(#[from] uploads::UploadLimitsError),
    #[error(transparent)]
    Timeouts(#[from] timeouts::TimeoutError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Auth(#[from] auth::AuthConfigError),
    #[error(transparent)]
    Tenant(#[from] tenant::TenantConfigError),
    #[error("{0} needs a Tokio runtime to start the gateway in")]
    NoRuntime(&'static str),
    #[error(transparent)]
    Cors(#[from] cors::CorsConfigError),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}
