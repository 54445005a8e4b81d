//! `ursula-chaos`: fault runs against a real `ursula` cluster, in the style of Jepsen.
//!
//! Module map (dependencies point down the list):
//! - `history`: the recorded operations of one run and the final log; plain data.
//! - `checker`: reads a history for anomalies (lost, duplicated or reordered appends, reads
//!   that are not a prefix of the final log, gaps on a tail, stale leader reads, applied
//!   refusals). Uses only `history`.
//! - `net`: the hosts (network namespaces on a bridge in a hub namespace) and the partitions
//!   among them (`iptables` rules inside each host).
//! - `client`: plain HTTP requests that follow `307`s by hand.
//! - `cluster`: the `ursula` node processes in their hosts and the gateway; kill, pause,
//!   restart, and a WAL disk that fills.
//! - `workload`: the concurrent clients, each recording its operations.
//! - `nemesis`: seeded fault schedules and how each fault is applied and healed.
//! - `sqlite`: the SQLite owner and live follower (`chaos-sqlite` of ursula-vfs-tests) and
//!   its own checks.
//! - `converge`: after the last heal, the cluster settles by itself: every group led, one
//!   leader per group on every node, leaderships within one of each other.
//! - `drill`: one fault held while its effects are checked step by step: the egress drill.
//! - `run`: one schedule end to end: cluster, clients, faults, final log, check, settling,
//!   report.
//!
//! The binary (`main.rs`) makes the hosts as root and runs itself inside the clients'
//! namespace; see docs/reliability.md.

pub mod checker;
pub mod client;
pub mod cluster;
pub mod converge;
pub mod drill;
pub mod history;
pub mod nemesis;
pub mod net;
pub mod run;
pub mod sqlite;
pub mod workload;
