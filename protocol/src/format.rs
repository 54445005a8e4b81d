//! The format epoch: the one number every durable layout and the peer protocol of this release
//! carry (the Raft WAL's marker and files, the cold tier's marker object, group snapshots and
//! the Raft protocol between peers). A node refuses data and peers of another epoch.

/// The format epoch this release reads and writes.
pub const FORMAT_EPOCH: u32 = 3;

/// The Raft protocol peers speak: the format epoch.
pub const RAFT_PROTOCOL: u32 = FORMAT_EPOCH;

/// The marker object at the cold tier's root that records the epoch.
pub const COLD_EPOCH_MARKER: &str = "URSULA_FORMAT_EPOCH";
