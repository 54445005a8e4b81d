//! Claiming the stream back for an owner the stream forgot. A stream forgets a producer idle
//! for 7 days; the owner's next commit then meets a sequence gap back to 0, which applied
//! nothing. The owner claims the stream again with the next epoch and keeps it only when the
//! claim lands right after its own last commit: anything else in between (another writer, or a
//! commit refused as never applied that was applied after all) means the stream is no longer
//! the file's, and the owner is fenced.

use ursula_protocol::offset::Offset;

use crate::append;
use crate::append::Outcome;
use crate::db::Db;
use crate::error::Kind;
use crate::format::Record;
use crate::format::Sidecar;
use crate::format::offset_text;
use crate::log;
use crate::replay;

/// The claim is in the stream, right after the owner's last commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reclaimed {
    pub epoch: u64,
    pub next_offset: Offset,
    pub frame_bytes: u64,
}

/// Claims the stream with `sidecar.epoch + 1`; what fails the commit otherwise: a refusal
/// (nothing reached the stream, the owner may try again) or a poison (a fence above all).
pub fn reclaim(db: &Db, sidecar: &Sidecar) -> Result<Reclaimed, (Outcome, u64)> {
    let epoch = sidecar.epoch + 1;
    let nonce: [u8; 16] = rand::random();
    let frame = Record::Claim { epoch, nonce }.to_frame().map_err(|e| {
        let reason = format!("cannot encode the claim: {e}");
        (poisoned(Kind::Internal, reason), 0)
    })?;
    let sent = append::claim(db, sidecar, epoch, &frame);
    let attempts = sent.attempts;
    let next_offset = match sent.outcome {
        Outcome::Acked { next_offset } => next_offset,
        Outcome::Forgotten => {
            let reason = "the stream refused a claim at producer seq 0 as a gap".to_owned();
            return Err((poisoned(Kind::StreamState, reason), attempts));
        }
        other => return Err((other, attempts)),
    };
    let from = sidecar.offset.unwrap_or_default();
    let len = frame.len() as u64;
    if next_offset.0 != from.0.saturating_add(len) || !claim_is_ours(db, sidecar, from, &frame)? {
        let reason = "the stream forgot this owner's producer, and something else was written after its last commit: another owner, or a commit refused as never applied that was applied after all";
        return Err((poisoned(Kind::Fenced, reason.to_owned()), attempts));
    }
    // Not one of the spec's events, so below its levels.
    db.event(
        log::Level::Debug,
        "claimed_again",
        &[("epoch", &epoch.to_string())],
    );
    Ok(Reclaimed {
        epoch,
        next_offset,
        frame_bytes: len,
    })
}

fn poisoned(kind: Kind, reason: String) -> Outcome {
    Outcome::Poisoned { kind, reason }
}

/// Whether the stream's bytes from `from` are this claim's frame: an answer as a duplicate
/// can be another owner's claim of the same epoch, which differs only in its nonce.
fn claim_is_ours(
    db: &Db,
    sidecar: &Sidecar,
    from: Offset,
    frame: &[u8],
) -> Result<bool, (Outcome, u64)> {
    let url = format!(
        "{}?offset={}&consistency=leader",
        db.url,
        offset_text::to_text(Some(from))
    );
    let answer = replay::get(&url, Some(sidecar.incarnation), false).map_err(|e| {
        let reason = format!("cannot read back the claim: {}", e.message);
        (poisoned(Kind::OutcomeUnknown, reason), 0)
    })?;
    Ok(answer.status == 200 && answer.body.starts_with(frame))
}
