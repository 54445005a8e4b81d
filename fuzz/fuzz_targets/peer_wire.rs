//! The bodies peers exchange (`server/src/raft/peer/server.rs`, `client.rs`, `lanes.rs`):
//! MessagePack requests a node decodes from any host that reaches its cluster port, and the
//! answers it decodes from its peers.
//!
//! The first byte picks the type, the rest is the body. Beyond "no panic" (and no allocation
//! out of proportion to the body, which libFuzzer's malloc limit catches): a body that decodes
//! re-encodes, the re-encoding decodes, and encodes to the same bytes again, so that what a
//! node forwards or stores of a decoded value is stable.

#![no_main]

use libfuzzer_sys::fuzz_target;
use openraft::error::InstallSnapshotError;
use openraft::error::RaftError;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::InstallSnapshotRequest;
use openraft::raft::InstallSnapshotResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use serde::Serialize;
use serde::de::DeserializeOwned;
use ursula::raft::types::TypeConfig;
use ursula::raft::peer::wire::Answer;
use ursula::raft::peer::wire::Barrier;
use ursula::raft::peer::wire::ElectAnswer;
use ursula::raft::peer::wire::ElectRequest;
use ursula::raft::peer::wire::Item;
use ursula::raft::peer::wire::Probe;
use ursula::raft::peer::wire::ProposeAnswer;
use ursula_state::stream::Command;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    match kind % 14 {
        // What `serve` and `serve_batch` decode.
        0 => stable::<AppendEntriesRequest<TypeConfig>>(body),
        1 => stable::<VoteRequest<u64>>(body),
        2 => stable::<InstallSnapshotRequest<TypeConfig>>(body),
        3 => stable::<Vec<Item>>(body),
        4 => stable::<ElectRequest>(body),
        5 => stable::<Command>(body),
        // What the sending side decodes from a peer's answer.
        6 => stable::<Result<AppendEntriesResponse<u64>, RaftError<u64>>>(body),
        7 => stable::<Result<VoteResponse<u64>, RaftError<u64>>>(body),
        8 => stable::<Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>>(
            body,
        ),
        9 => stable::<Vec<Answer>>(body),
        10 => stable::<Barrier>(body),
        11 => stable::<ElectAnswer>(body),
        12 => stable::<ProposeAnswer>(body),
        _ => stable::<Probe>(body),
    }
    // A batch's items are `append` bodies: decode each as the server would.
    if kind % 14 == 3
        && let Ok(items) = rmp_serde::from_slice::<Vec<Item>>(body)
    {
        for item in items {
            stable::<AppendEntriesRequest<TypeConfig>>(&item.body);
        }
    }
});

/// Decodes `body` as a `T`; a value that decodes re-encodes to bytes that decode and
/// re-encode to the same bytes.
fn stable<T: Serialize + DeserializeOwned>(body: &[u8]) {
    let Ok(value) = rmp_serde::from_slice::<T>(body) else {
        return;
    };
    let once = rmp_serde::to_vec(&value).expect("a decoded value encodes");
    let again: T = rmp_serde::from_slice(&once).expect("an encoded value decodes");
    let twice = rmp_serde::to_vec(&again).expect("encodes again");
    assert_eq!(once, twice, "the encoding of a decoded value is not stable");
}
