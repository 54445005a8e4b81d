//! What keeps a replica that may have lost acknowledged writes from deciding anything, and how
//! it comes back.
//!
//! - [`files`]: the WAL root's own files (format epoch, topology, run state, gate records).
//! - [`floor`]: the vote floor of a replica that lost its vote.
//! - [`gates`]: the recovery gates' state, their record, and which groups a start gates.
//! - [`vote_hold`]: a replica that held nothing votes for no one until its first probe round.

pub mod files;
pub mod floor;
pub mod gates;
pub mod vote_hold;
