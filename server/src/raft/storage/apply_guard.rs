//! Apply-failure isolation: a panic while a committed entry applies stops that group alone.
//! The panic is caught on the group's core, the group is marked stopped in the runtime (so its
//! possibly half-changed state is never read, flushed or snapshotted again), and the state
//! machine answers openraft with an error, which stops the group's Raft without advancing its
//! applied index past the entry. The node's other groups keep serving.
//!
//! Also here: the `[testing] apply_panic_on` hook, the drill's deterministic bug.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use openraft::LogId;
use ursula_state::stream::Body;
use ursula_state::stream::Command;

use crate::runtime::ApplyStop;
use crate::runtime::Runtime;

/// Runs `apply` (one entry's commands on the group's state); a panic becomes the group's
/// [`ApplyStop`], recorded in `rt`, and is returned as such.
pub fn guarded<R>(
    rt: &Runtime,
    group: u32,
    log_id: LogId<u64>,
    apply: impl FnOnce() -> R,
) -> Result<R, ApplyStop> {
    std::panic::catch_unwind(AssertUnwindSafe(apply)).map_err(|payload| {
        let stop = ApplyStop {
            term: log_id.leader_id.term,
            index: log_id.index,
            kind: "panic",
            message: panic_message(payload.as_ref()),
        };
        tracing::error!(
            group,
            term = stop.term,
            index = stop.index,
            message = %stop.message,
            "a committed command failed to apply: the group stops on this replica (apply_stopped); its other groups keep serving. Keep the WAL and replay with corrected code; never skip the record"
        );
        rt.stop_applying(group, stop.clone());
        stop
    })
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with no message".to_owned()
    }
}

/// The test hook: panics when `cmd` is an append whose stored bytes hold `marker`.
pub fn panic_if_poisoned(marker: Option<&[u8]>, cmd: &Command) {
    let Some(marker) = marker else {
        return;
    };
    let Command::Append(a) = cmd else {
        return;
    };
    let bytes = match &a.body {
        Body::Raw(b) | Body::Json(Ok(b)) => b,
        Body::Json(Err(_)) | Body::External(_) => return,
    };
    if bytes.windows(marker.len()).any(|w| w == marker) {
        panic!(
            "testing.apply_panic_on: an append to {} holds the marker",
            a.key
        );
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    #[test]
    fn a_panic_stops_only_its_group_with_the_entry_and_message() {
        let rt = Runtime::start(1, 2, 0).expect("runtime");
        let id = LogId::new(CommittedLeaderId::new(3, 1), 17);
        assert_eq!(guarded(&rt, 0, id, || 5), Ok(5));
        assert!(rt.apply_stop(0).is_none());
        let stop = guarded(&rt, 1, id, || -> u8 { panic!("bad {}", 7) }).expect_err("panicked");
        assert_eq!((stop.term, stop.index, stop.kind), (3, 17, "panic"));
        assert_eq!(stop.message, "bad 7");
        assert_eq!(rt.apply_stop(1), Some(&stop));
        assert!(rt.apply_stop(0).is_none(), "the other group runs");
        assert!(
            rt.with_group_now(1, |_| ()).is_none(),
            "its state is not touched"
        );
        assert!(rt.with_group_now(0, |_| ()).is_some());
    }

    #[test]
    fn only_an_append_holding_the_marker_panics() {
        let append = |body: &'static [u8]| {
            Command::Append(ursula_state::stream::Append {
                key: "b/s".into(),
                content_type: None,
                close: false,
                stream_seq: None,
                producer: None,
                incarnation: None,
                body: Body::Raw(bytes::Bytes::from_static(body)),
            })
        };
        panic_if_poisoned(None, &append(b"xPOISONx"));
        panic_if_poisoned(Some(b"POISON"), &append(b"fine"));
        let hit =
            std::panic::catch_unwind(|| panic_if_poisoned(Some(b"POISON"), &append(b"aPOISON")));
        assert!(hit.is_err());
    }
}
