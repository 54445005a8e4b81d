//! `ursula-soak`: months of a cluster's life compressed into minutes (docs/cold-tier.md, "The
//! month-in-an-hour soak"). A durable 3-voter cluster on a real S3 server (SeaweedFS) takes
//! thousands of streams' small appends, staged 1-8 MiB appends, snapshots of 1-64 MiB,
//! retention advances, deletes and bucket purges while nodes are stopped and SIGKILLed; after
//! each round it samples replicated state, snapshot sizes, memory and the bucket; at the end
//! it reads every byte back.
//!
//! Module map (dependencies point down the list):
//! - `spec`: the soak's shape: presets and command-line settings.
//! - `model`: what each stream must hold: deterministic bodies from seeds, never kept whole.
//! - `client`: HTTP against the cluster: redirects followed, ambiguous answers retried.
//! - `cluster`: SeaweedFS and the three voters, their faults, and what can be measured of them.
//! - `run`: the rounds, the samples, the final read-back and the report.

pub mod client;
pub mod cluster;
pub mod model;
pub mod run;
pub mod spec;
