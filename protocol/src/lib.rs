//! The wire vocabulary every Ursula component shares. No I/O and no async here.
//!
//! Module map:
//! - [`headers`]: header names, in the lowercase form HTTP/1.1 and HTTP/2 agree on.
//! - [`offset`]: the 20-character offset token and the `-1` / `now` sentinels.
//! - [`ids`]: bucket and stream ID rules, percent-decoding of path segments.
//! - [`content_type`]: content-type normalization and the JSON / text classification.
//! - [`seq`]: `Stream-Seq` values and producer header limits.
//! - [`lifetime`]: `Stream-TTL` and `Stream-Expires-At` parsing.
//! - [`cursor`]: the live-read cursor algorithm.
//! - [`refusal`]: `x-ursula-not-applied` tokens.
//! - [`path`]: which bucket, stream or internal route a request path names.
//! - [`incarnation`]: stream and process incarnations, 16 hex digits.
//! - [`format`]: the format epoch and the Raft protocol version.
//! - [`metrics`]: the `/__ursula/metrics` document the server writes and `ursulactl` reads.
//! - [`admin`]: the admin plane's answers (drain mark, transfer, quorum proof, membership).

pub mod admin;
pub mod content_type;
pub mod cursor;
pub mod format;
pub mod headers;
pub mod ids;
pub mod incarnation;
pub mod lifetime;
pub mod metrics;
pub mod offset;
pub mod path;
pub mod refusal;
pub mod seq;

/// The largest body an append or an inline snapshot publish may carry.
pub const MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;
/// The most bytes one read response or one SSE data event carries.
pub const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;
