//! The node's HTTP planes over HTTP/1.1 (Operations, "The admin plane"):
//!
//! - the client plane ([`client_router`]): stream traffic, read-only metrics and readiness.
//!   One dispatcher routes every request by hand, because the path rules (percent-decoding, ID
//!   validation, subresources, the `/v1/stream` compatibility family) are the protocol's, not
//!   a router's. Every other `/__ursula/*` path answers `404` here.
//! - the admin plane ([`admin::router`]): metrics, readiness and every admin mutation, each
//!   bound to the process an operator observed (`x-ursula-process-incarnation`).
//! - the cluster plane ([`cluster::router`]): peer RPCs, mounted by the node.
//!
//! Modules:
//! - [`client_plane`]: the client plane's dispatcher and its `/__ursula/*` router.
//! - [`state`]: [`AppState`], what every handler reads.
//! - [`request`]: routing and header parsing.
//! - [`names`]: the protocol's header names, built at compile time.
//! - [`reply`]: responses and the mapping of refusals to statuses.
//! - [`write`], [`read`], [`live`]: the stream routes.
//! - [`admin`]: the operational endpoints under `/__ursula/` and the admin plane.
//! - [`tenancy`]: `/__ursula/usage` (both planes) and the admin plane's bucket purge.
//! - [`backup`]: the admin plane's `/__ursula/backup/*` routes.
//! - [`admin_raft`]: the admin plane's Raft routes, over the engine's typed operations API.
//! - [`cluster`]: the cluster plane: peer RPCs and the protocol probe, over the engine's
//!   peer service.
//! - [`serve`]: accept loops on the core threads.
//! - [`head_watch`]: the request-head timeout, one clock per connection.
//! - [`woken`]: a future polled only after it woke its task (a connection's side branches).

pub mod admin;
pub mod admin_raft;
pub mod backup;
pub mod client_plane;
pub mod cluster;
pub mod head_watch;
pub mod live;
pub mod names;
pub mod read;
pub mod reply;
pub mod request;
pub mod serve;
pub mod state;
pub mod tenancy;
pub mod woken;
pub mod write;

pub use client_plane::ClientPlane;
pub use client_plane::client_router;
pub use state::AppState;
