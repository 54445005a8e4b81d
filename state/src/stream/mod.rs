//! The stream state machine: deterministic, no I/O, no clock of its own. Both engines drive it,
//! so a single node and a Raft replica cannot answer differently.
//!
//! - [`command`]: what a write asks for and what it answers.
//! - [`machine`]: one group's streams and the rules that apply commands to them.
//! - [`read`]: read views (catch-up, HEAD, snapshot, bootstrap) over the same state.
//! - [`data`]: a stream's stored bytes.
//! - [`page`]: the cold index: its summary in state, its pages' byte layout, read pieces.
//! - `coldstate`: the commands that compact, index and collect a stream's cold history.
//! - `operator`: an operator's whole-group commands: a bucket purge, a backup import.
//! - [`producer`]: producer epochs, sequence numbers and receipts.
//! - [`json`]: JSON-mode body validation and flattening.
//! - [`sorted`]: hash maps encoded in key order, so a state's encoding is canonical.
//! - [`ledger`]: per-bucket data: usage counters, erasure fences, an import's staged parts.
//! - [`tenancy`]: views over it: the usage report and a backup state's deep check.

#[cfg(test)]
mod coldindex_tests;
mod coldstate;
pub mod command;
pub mod data;
pub mod json;
pub mod ledger;
pub mod machine;
mod operator;
pub mod page;
pub mod producer;
pub mod read;
mod sorted;
pub mod tenancy;
#[cfg(test)]
mod tests;

pub use command::*;
pub use machine::GroupState;
