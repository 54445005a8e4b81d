//! The server's integration tests: one test binary (`cargo nextest run -p ursula`), a module a
//! suite, all on one harness. A test's full name is `<suite>::<test>`, so
//! `-E 'test(/^raft_cluster::/)'` runs one suite.
//!
//! Module map:
//! - `harness`: what the suites share: loopback ports and scratch directories, real `ursula`
//!   nodes and clusters (`cluster`), `ursula gateway` in front of them (`gateway`), an issuer
//!   and hand-signed tokens (`auth`), the real `ursulactl` (`ctl`), and the router in process
//!   (`router`).
//! - `router_*`: the protocol in process against the router, on either engine
//!   (`URSULA_TEST_ENGINE=raft` runs them on a single Raft node over a disk WAL).
//! - `binary`, `planes`, `admission`, `shutdown_drain`, `scratch_dirs`, `formats`, `tenancy`:
//!   one real node: its listeners, budgets, shutdown, and data an earlier build wrote.
//! - `raft_*`, `cold_tier`: real Raft clusters: failover, handoff, recovery, snapshots, the WAL
//!   cache and disk shedding, the store gate, partitions, the S3 cold tier.
//! - `gateway*`: `ursula gateway` in front of real nodes: forwarding, access control (hand-signed
//!   tokens, a real OIDC issuer, fuzzed credentials, replayed attacks), CORS, h2c, tenants,
//!   upload bounds.
//! - `ursulactl*`, `maintenance_fence`: the real `ursulactl` against real clusters.

mod harness;

mod admission;
mod binary;
mod cold_tier;
mod formats;
mod gateway;
mod gateway_auth;
mod gateway_auth_fuzz;
mod gateway_cors;
mod gateway_h2;
mod gateway_oidc;
mod gateway_security;
mod gateway_tenants;
mod gateway_uploads;
mod maintenance_fence;
mod planes;
mod raft_cluster;
mod raft_handoff;
mod raft_maintenance;
mod raft_partition;
mod raft_recovery;
mod raft_restart_reads;
mod raft_snapshots;
mod raft_store_gate;
mod raft_wal_cache;
mod raft_wal_disk_shed;
mod router_fuzz;
mod router_live;
mod router_producers;
mod router_reads;
mod router_snapshots;
mod router_streams;
mod scratch_dirs;
mod shutdown_drain;
mod tenancy;
mod ursulactl;
mod ursulactl_backup;
mod ursulactl_ops;
