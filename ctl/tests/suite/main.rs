//! `ursulactl`'s integration tests: one test binary (`cargo nextest run -p ursula-ctl`), a
//! module a suite. The real `ursulactl` runs against real `ursula` processes; `ursula` is the
//! build's own, so build it too (`cargo nextest run --workspace` does).
//!
//! Module map:
//! - `harness`: real clusters and binaries (`ursula-testkit`), hand-written backups, a stub node.
//! - `ursulactl`: `status` against a quick-start node and a cluster.
//! - `ursulactl_ops`: the operational verbs against a 3-voter cluster.
//! - `ursulactl_backup`: `backup-create`, `backup-verify` and `restore` against real clusters.
//! - `maintenance_fence`: the fence the verbs take and refuse.
//! - `backup_verify`, `backup_s3`: verification of hand-written backups, on a directory and
//!   on a real S3 server (SeaweedFS).
//! - `backup_stub`: what only a scripted node can answer.

mod harness;

mod backup_s3;
mod backup_stub;
mod backup_verify;
mod maintenance_fence;
mod ursulactl;
mod ursulactl_backup;
mod ursulactl_ops;
