//! `ursula`: the stream server.
//!
//! Module map:
//! - [`config`]: TOML config, presets and CLI overrides, validated at start.
//! - [`stream`]: the deterministic stream state machine every engine applies.
//! - [`runtime`]: core threads, group ownership, live-reader wake-ups.
//! - [`engine`]: the `GroupEngine` seam (in-memory today; Raft behind the same trait).
//! - [`http`]: the client plane and `/__ursula/*` over HTTP/1.1.
//! - [`node`]: wiring it all together for `ursula server`.

pub mod config;
pub mod engine;
pub mod http;
pub mod node;
pub mod runtime;
pub mod stream;
