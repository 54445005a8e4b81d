//! The server's integration tests: one test binary (`cargo nextest run -p ursula`), a module a
//! suite, all on one harness. A test's full name is `<suite>::<test>`, so
//! `-E 'test(/^raft_cluster::/)'` runs one suite.
//!
//! Module map:
//! - `harness`: what the suites share: loopback ports, scratch directories and real `ursula`
//!   nodes and clusters from the workspace's harness (`ursula-testkit`), and the router in
//!   process (`router`).
//! - `router_*`: the protocol in process against the router, on either engine
//!   (`URSULA_TEST_ENGINE=raft` runs them on a single Raft node over a disk WAL).
//! - `binary`, `planes`, `admission`, `shutdown_drain`, `scratch_dirs`, `formats`, `tenancy`:
//!   one real node: its listeners, budgets, shutdown, and data an earlier build wrote.
//! - `raft_*`, `cold_tier`, `cold_sweep`: real Raft clusters: failover, handoff, recovery,
//!   snapshots, the WAL cache and disk shedding, the store gate, partitions, the S3 cold tier
//!   and its orphan sweep.
//!
//! The gateway's suites are in `gateway/tests/suite`, `ursulactl`'s in `ctl/tests/suite`, on the
//! same harness (`ursula-testkit`).

mod harness;

mod admission;
mod binary;
mod cold_external;
mod cold_index;
mod cold_index_s3;
mod cold_sweep;
mod cold_tier;
mod formats;
mod planes;
mod raft_apply_failure;
mod raft_balance;
mod raft_cluster;
mod raft_handoff;
mod raft_maintenance;
mod raft_partition;
mod raft_recovery;
mod raft_restart_reads;
mod raft_s3_snapshots;
mod raft_s3_snapshots_only;
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
