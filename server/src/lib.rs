//! `ursula`: the stream server.
//!
//! Module map (the stream state machine and the backup format are the `ursula-state` crate):
//! - [`admission`]: write-admission refusals made before anything is proposed.
//! - [`coldtier`]: the S3 cold tier: flush worker, cold reads, garbage collection.
//! - [`config`]: TOML config, presets and CLI overrides, validated at start.
//! - [`runtime`]: core threads, group ownership, live-reader wake-ups; [`affinity`]: which
//!   CPU each core thread is pinned to.
//! - [`relay`]: one task per core and stream that repeats a group's wake-ups to the core's readers.
//! - [`engine`]: the `GroupEngine` seam: in memory, or Raft ([`raft`]) behind the same trait.
//! - [`raft`]: openraft groups over the per-core disk journal, and their peer transport.
//! - [`fence`]: the maintenance fence, process-local admission of one maintenance executor.
//! - [`http`]: the client plane and `/__ursula/*` over HTTP/1.1.
//! - [`memcap`]: `runtime.node_memory_abort_cap_size`, the resident-memory abort.
//! - [`node`]: wiring it all together for `ursula server`.

pub mod admission;
pub mod affinity;
pub mod coldtier;
pub mod config;
pub mod engine;
pub mod fence;
pub mod http;
pub mod memcap;
pub mod node;
pub mod raft;
pub mod relay;
pub mod runtime;
