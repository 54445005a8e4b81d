//! `ursula-state`: what a group of streams is, apart from how it is stored or replicated. No
//! I/O, no clock of its own: the server's engines apply commands to it, and `ursulactl` reads
//! the backups made of it, without either of them bringing the other's dependencies.
//!
//! - [`stream`]: the deterministic stream state machine every engine applies: commands, one
//!   group's streams, read views, producers, JSON bodies, the per-bucket ledger.
//! - [`backup`]: the backup format: group objects (a group's encoded state with its identity),
//!   the manifest, and their deep check.
//!
//! Dependencies point one way: `backup` reads `stream`; `stream` knows nothing of backups.

pub mod backup;
pub mod stream;
