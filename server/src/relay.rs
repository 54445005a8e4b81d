//! Per-core relays of a stream's ticks.
//!
//! A stream's live readers sit on whichever core accepted their connection, and the group that
//! wakes them runs its turn on one thread. Waking a task that belongs to another core's
//! current-thread runtime costs that runtime an unpark, a syscall, for every task. A fan-out
//! to many SSE readers split over the cores would pay one per reader of every other core, in a
//! row on the appending thread, whose own readers wait behind them (measured in
//! docs/dev/speed-log.md, "The SSE fan-out (point 5)").
//!
//! So the readers of one stream on one core share a relay: a task on that core that holds the
//! group's receiver and repeats every tick on a channel of its own. The group wakes one task
//! per core; the relay wakes the core's readers without leaving the thread.
//!
//! A reader must take its relay in the same group turn as the read it waits after (see
//! [`local`]), so no change can fall between the two.

use std::cell::RefCell;
use std::collections::HashMap;

use tokio::sync::watch;

use crate::runtime::Tick;

/// One stream's relay on this core.
struct Relay {
    /// A receiver of the group's channel, to recognise it: a deleted and recreated stream
    /// gets a new channel, and a new relay.
    source: watch::Receiver<Tick>,
    /// What each new reader clones.
    template: watch::Receiver<Tick>,
}

thread_local! {
    static RELAYS: RefCell<HashMap<Box<str>, Relay>> = RefCell::new(HashMap::new());
}

/// Turns a receiver of the group's channel for `key` into one of this core's relay for it.
///
/// Call it in the group turn that subscribed: a relay that has not yet repeated an earlier tick
/// repeats it later, which wakes the reader once more for nothing, and every change after this
/// turn reaches the group's channel after it, so the relay repeats that too. Outside a Tokio
/// runtime the receiver comes back as it is.
pub fn local(key: &str, source: watch::Receiver<Tick>) -> watch::Receiver<Tick> {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return source;
    };
    RELAYS.with(|relays| {
        let mut relays = relays.borrow_mut();
        if let Some(relay) = relays.get(key)
            && relay.source.same_channel(&source)
        {
            let mut rx = relay.template.clone();
            rx.mark_unchanged();
            return rx;
        }
        let (tx, template) = watch::channel(source.borrow().clone());
        let mut rx = template.clone();
        rx.mark_unchanged();
        let key: Box<str> = key.into();
        relays.insert(
            key.clone(),
            Relay {
                source: source.clone(),
                template: template.clone(),
            },
        );
        handle.spawn(repeat(key, source, tx, template));
        rx
    })
}

/// Repeats the group's ticks until the group drops its channel (the stream was deleted or
/// recreated: dropping `tx` then ends the readers' waits too) or no reader is left.
async fn repeat(
    key: Box<str>,
    mut source: watch::Receiver<Tick>,
    tx: watch::Sender<Tick>,
    template: watch::Receiver<Tick>,
) {
    while source.changed().await.is_ok() {
        let tick = source.borrow_and_update().clone();
        tx.send_replace(tick);
        // Two receivers are the relay's own (the map's template and this task's): with no
        // other, no reader waits here any more.
        if tx.receiver_count() <= 2 {
            break;
        }
    }
    RELAYS.with(|relays| {
        let mut relays = relays.borrow_mut();
        if relays
            .get(&key)
            .is_some_and(|r| r.template.same_channel(&template))
        {
            relays.remove(&key);
        }
    });
}

/// How many relays this thread holds (tests).
#[cfg(test)]
fn held() -> usize {
    RELAYS.with(|r| r.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(tail: u64) -> Tick {
        Tick {
            incarnation: 1,
            tail,
            closed: false,
            appended: None,
        }
    }

    async fn settle() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn readers_of_one_stream_on_a_core_share_one_relay_and_see_every_change() {
        let (tx, source) = watch::channel(tick(0));
        let mut a = local("s", source.clone());
        let mut b = local("s", source.clone());
        assert_eq!(held(), 1);
        // The group's channel has the caller's receiver, the relay's and the map's.
        assert_eq!(tx.receiver_count(), 3);
        tx.send_replace(tick(5));
        a.changed().await.expect("a woke");
        b.changed().await.expect("b woke");
        assert_eq!(a.borrow_and_update().tail, 5);
        assert_eq!(b.borrow_and_update().tail, 5);
        // A reader that joins after the relay repeated a tick does not see that tick again.
        let c = local("s", source.clone());
        assert!(!c.has_changed().expect("open"));
    }

    #[tokio::test]
    async fn a_new_channel_for_the_key_gets_a_new_relay_and_a_dropped_one_ends_its_readers() {
        let (old_tx, old_source) = watch::channel(tick(0));
        let mut old = local("k", old_source);
        let (new_tx, new_source) = watch::channel(tick(0));
        let mut new = local("k", new_source);
        drop(old_tx);
        assert!(
            old.changed().await.is_err(),
            "the deleted stream's readers end"
        );
        new_tx.send_replace(tick(3));
        new.changed().await.expect("the new relay repeats");
        assert_eq!(new.borrow().tail, 3);
    }

    #[tokio::test]
    async fn a_relay_with_no_reader_left_goes_at_the_next_change() {
        let (tx, source) = watch::channel(tick(0));
        let reader = local("gone", source.clone());
        drop(source);
        assert_eq!(held(), 1);
        drop(reader);
        tx.send_replace(tick(1));
        settle().await;
        assert_eq!(held(), 0);
        assert_eq!(
            tx.receiver_count(),
            0,
            "the relay let go of the group's channel"
        );
    }
}
