//! Peer traffic between the nodes of a cluster.
//!
//! - [`wire`]: RPC kinds and paths, the batch envelope, answers, exchange errors.
//! - [`protocol`]: Raft protocol 3: the startup probe, the header check, the mismatch flag.
//! - [`lanes`]: every group's `append` RPCs to one peer batched into one request.
//! - [`acks`]: when each peer last acknowledged each group's appends.
//! - [`client`]: sending RPCs (openraft's network traits, Ursula's `barrier` and `probe`).

pub mod acks;
pub mod client;
pub mod lanes;
pub mod protocol;
pub mod wire;
