//! `ursula-chaos`: fault runs against a real `ursula` cluster, in the style of Jepsen.
//!
//! Module map (dependencies point down the list):
//! - `history`: the recorded operations of one run and the final log; plain data.
//! - `checker`: reads a history for anomalies (lost, duplicated or reordered appends, reads
//!   that are not a prefix of the final log, gaps on a tail, stale leader reads, applied
//!   refusals). Uses only `history`.

pub mod checker;
pub mod history;
