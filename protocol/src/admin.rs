//! The admin plane's request and answer shapes, shared by the server and `ursulactl` (the
//! spec's "shared admin protocol types"): the leadership-shed state, leader transfer,
//! self-election, the quorum proof, learners and membership. Field names are wire names.
//!
//! Routes (admin plane, every mutation and the quorum proof behind
//! `x-ursula-process-incarnation`):
//! - `POST`/`DELETE /__ursula/leadership-shed/maintenance` -> [`ShedState`]
//!   (`GET /__ursula/leadership-shed` on the cluster plane reads it).
//! - `POST /__ursula/raft/{g}/leader/transfer/{node}` -> [`Transferred`]; `409` when this node
//!   does not lead the group or the target may not take it now (recovering, drained, behind,
//!   silent, or it did not take over in time), `400` for a target that is no voter of the
//!   group or is this node, `404` for a group this node does not host, `500` for a stopped Raft.
//! - `POST /__ursula/raft/{g}/self-election` -> [`Elected`]; `409` on the leader or a drained
//!   or gated replica, `503` on a stopped Raft.
//! - `GET /__ursula/raft/{g}/quorum` -> [`QuorumProof`]; only on the group's leader (`409`
//!   naming the leader otherwise).
//! - `POST /__ursula/raft/{g}/snapshot`, `POST /__ursula/raft/{g}/purge` -> [`LogAction`].
//! - `POST /__ursula/raft/{g}/learners/{node}?addr=&blocking=` and
//!   `POST /__ursula/raft/{g}/membership?voters=1,2,3` -> [`MembershipChanged`]; leader only
//!   (`409` naming the leader), `400` for a missing or bad parameter.
//! - `POST /__ursula/maintenance-fence` (token in `x-ursula-maintenance-fence`) and
//!   `POST /__ursula/maintenance-fence/retire` -> [`FenceView`]; `409` for a token the state
//!   does not admit, `400` for a malformed token, `428` without one, `503` when a Raft group's
//!   queue could not be confirmed (the fence then stays uncertain).

use serde::Deserialize;
use serde::Serialize;

/// The maintenance drain bit of [`ShedState::bits`].
pub const SHED_MAINTENANCE: u64 = 1;
/// The bit a node sets while its snapshot-store health gate judges the store unhealthy (S3
/// probes or cold-flush writes failing for `storage.cold.s3.unhealthy_ticks` ticks): it hands
/// its leaderships to peers and leads nothing until `heal_ticks` good ticks in a row. The spec
/// names the gate but not its bit or state.
pub const SHED_SNAPSHOT_STORE: u64 = 2;
/// The bit a node sets while its cluster-egress gate (`governance.cluster_probe`) finds that
/// its probes reach fewer peers than make a quorum with it: it hands every leadership off and
/// leads nothing until its probes reach a quorum again. The spec names the gate but not its
/// bit or state.
pub const SHED_CLUSTER_EGRESS: u64 = 4;
/// The bit a node sets while its WAL disk is under pressure (`wal_disk_pressure`): it refuses
/// writes, so it hands its leaderships to peers that can take them and leads nothing until the
/// disk has room again. The spec names the state but not its bit.
pub const SHED_WAL_DISK: u64 = 8;

/// Every bit that makes a node lead nothing.
const SHED_ANY: u64 = SHED_MAINTENANCE | SHED_SNAPSHOT_STORE | SHED_CLUSTER_EGRESS | SHED_WAL_DISK;

/// A node's leadership-shed state: what the drain mark makes it do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShedState {
    pub bits: u64,
    /// `maintenance-drain` while the mark is set, `none` otherwise.
    pub state: String,
    pub should_accept_transfer: bool,
    pub should_campaign: bool,
    pub should_shed_current_leaders: bool,
}

impl Default for ShedState {
    fn default() -> ShedState {
        ShedState::of_bits(0)
    }
}

impl ShedState {
    pub fn of_bits(bits: u64) -> ShedState {
        let sheds = bits & SHED_ANY != 0;
        let state = if bits & SHED_MAINTENANCE != 0 {
            "maintenance-drain"
        } else if bits & SHED_SNAPSHOT_STORE != 0 {
            "snapshot-store-unhealthy"
        } else if bits & SHED_CLUSTER_EGRESS != 0 {
            "cluster-egress-unhealthy"
        } else if bits & SHED_WAL_DISK != 0 {
            "wal-disk-pressure"
        } else {
            "none"
        };
        ShedState {
            bits,
            state: state.to_owned(),
            should_accept_transfer: !sheds,
            should_campaign: !sheds,
            should_shed_current_leaders: sheds,
        }
    }

    /// The operator's maintenance mark is set.
    pub fn drained(&self) -> bool {
        self.bits & SHED_MAINTENANCE != 0
    }

    /// Any reason to lead nothing: the maintenance mark, an unhealthy snapshot store, impaired
    /// cluster egress or WAL disk pressure.
    pub fn sheds(&self) -> bool {
        !self.should_campaign
    }

    /// Why the node sheds, for a refusal: `drained` for the operator's mark, else the state.
    pub fn why(&self) -> &str {
        if self.drained() {
            "drained"
        } else {
            &self.state
        }
    }
}

/// A leader transfer that took effect: `to` leads the group now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transferred {
    pub raft_group_id: u32,
    pub from: u64,
    pub to: u64,
    /// The term the new leader leads in.
    pub term: u64,
    /// How long the handoff took, from the request to the new leader's first heartbeat seen.
    pub elapsed_ms: u64,
}

/// A self-election that made this node the group's leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elected {
    pub raft_group_id: u32,
    pub leader: u64,
    pub term: u64,
}

/// A fresh ReadIndex round of the group's leader: every replica that applies `read_index`
/// under `term` holds the prefix a quorum confirmed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumProof {
    pub raft_group_id: u32,
    pub leader: u64,
    pub term: u64,
    /// The confirmed prefix (`null` for an empty log).
    pub read_index: Option<u64>,
    pub voter_ids: Vec<u64>,
    pub learner_ids: Vec<u64>,
}

/// A manual snapshot or purge of one group's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogAction {
    pub raft_group_id: u32,
    /// The last index the group's snapshot covers after the action.
    pub snapshot_index: Option<u64>,
    /// The last index purged from the log after the action.
    pub purged_index: Option<u64>,
}

/// A membership change (a learner added, or the voter set replaced) and the log index at
/// which it was committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipChanged {
    pub raft_group_id: u32,
    pub log_index: u64,
    pub voter_ids: Vec<u64>,
    pub learner_ids: Vec<u64>,
}

/// The maintenance-executor token `reservation_id:generation:executor_id`: two ids of 32
/// lowercase hexadecimal characters and a nonzero generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceToken {
    pub reservation_id: String,
    pub generation: u64,
    pub executor_id: String,
}

/// Why a `x-ursula-maintenance-fence` value is no token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not a maintenance fence token (reservation_id:generation:executor_id, 32 lowercase hex, nonzero generation, 32 lowercase hex): {0}"
)]
pub struct BadFenceToken(pub String);

fn hex32(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl FenceToken {
    pub fn parse(s: &str) -> Result<FenceToken, BadFenceToken> {
        let bad = || BadFenceToken(s.to_owned());
        let mut parts = s.split(':');
        let (Some(r), Some(g), Some(e), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        // `u64::from_str` takes a leading `+`; a token has one spelling only.
        if !g.bytes().all(|b| b.is_ascii_digit()) || g.starts_with('0') {
            return Err(bad());
        }
        let generation = g.parse::<u64>().map_err(|_| bad())?;
        if !hex32(r) || !hex32(e) || generation == 0 {
            return Err(bad());
        }
        Ok(FenceToken {
            reservation_id: r.to_owned(),
            generation,
            executor_id: e.to_owned(),
        })
    }
}

impl std::fmt::Display for FenceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.reservation_id, self.generation, self.executor_id
        )
    }
}

/// A node's maintenance fence as the metrics (`maintenance_fence`, `null` while unclaimed)
/// and the lifecycle routes report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceView {
    /// `active` or `retired`.
    pub state: String,
    pub reservation_id: String,
    pub generation: u64,
    pub executor_id: String,
}

impl FenceView {
    pub fn of(state: &str, t: &FenceToken) -> FenceView {
        FenceView {
            state: state.to_owned(),
            reservation_id: t.reservation_id.clone(),
            generation: t.generation,
            executor_id: t.executor_id.clone(),
        }
    }

    /// Whether this is `state` of exactly `t`.
    pub fn is(&self, state: &str, t: &FenceToken) -> bool {
        self.state == state
            && self.reservation_id == t.reservation_id
            && self.generation == t.generation
            && self.executor_id == t.executor_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_mark_reads_as_the_spec_shows_it() {
        let v = serde_json::to_value(ShedState::of_bits(SHED_MAINTENANCE)).expect("encode");
        assert_eq!(
            v,
            serde_json::json!({
                "bits": 1,
                "state": "maintenance-drain",
                "should_accept_transfer": false,
                "should_campaign": false,
                "should_shed_current_leaders": true
            })
        );
        let clear = ShedState::of_bits(0);
        assert!(!clear.drained() && clear.should_campaign && clear.state == "none");
    }

    #[test]
    fn wal_disk_pressure_sheds_without_being_the_operators_mark() {
        let disk = ShedState::of_bits(SHED_WAL_DISK);
        assert_eq!(disk.state, "wal-disk-pressure");
        assert!(disk.sheds() && !disk.drained());
        assert!(!disk.should_campaign && !disk.should_accept_transfer);
        assert!(disk.should_shed_current_leaders);
        let store = ShedState::of_bits(SHED_SNAPSHOT_STORE | SHED_WAL_DISK);
        assert_eq!(store.state, "snapshot-store-unhealthy");
        assert!(store.sheds() && !store.drained() && !store.should_accept_transfer);
        let egress = ShedState::of_bits(SHED_CLUSTER_EGRESS | SHED_WAL_DISK);
        assert_eq!(egress.state, "cluster-egress-unhealthy");
        assert!(egress.sheds() && !egress.drained() && !egress.should_campaign);
        let both = ShedState::of_bits(SHED_MAINTENANCE | SHED_WAL_DISK);
        assert_eq!(both.state, "maintenance-drain");
        assert!(both.drained() && both.sheds());
    }

    #[test]
    fn fence_tokens_have_one_spelling() {
        let r = "0123456789abcdef0123456789abcdef";
        let e = "fedcba9876543210fedcba9876543210";
        let t = FenceToken::parse(&format!("{r}:7:{e}")).expect("token");
        assert_eq!(t.generation, 7);
        assert_eq!(t.to_string(), format!("{r}:7:{e}"));
        for bad in [
            format!("{r}:0:{e}"),
            format!("{r}:+7:{e}"),
            format!("{r}:07:{e}"),
            format!("{r}:7"),
            format!("{r}:7:{e}:x"),
            format!("{}:7:{e}", r.to_uppercase()),
            format!("{r}:7:{}", &e[1..]),
        ] {
            assert!(FenceToken::parse(&bad).is_err(), "{bad}");
        }
    }
}
