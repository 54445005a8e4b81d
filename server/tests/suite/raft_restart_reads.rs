//! A leader restarted in its own term (openraft restores a node whose committed vote names it
//! as leader at once) knows only the commit index it persisted, which can lag appends it
//! acknowledged before it stopped: a read it confirms could then answer `416` for an offset an
//! earlier read had served (docs/reliability.md, "What the runs found"). So its read index has
//! a floor: its last log index at start.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::harness::cluster::*;

const PATH: &str = "/demo/restart";

/// The index of the node that leads the stream's group.
fn leader(bases: &[String]) -> usize {
    wait_for(30, "a leader of the stream", || {
        bases.iter().position(|b| agent_raw(b, PATH).0 == 200)
    })
}

#[test]
fn a_leader_restarted_in_its_term_never_refuses_an_offset_it_acknowledged() {
    let dir = tempfile_dir("restart-reads");
    let (_, mut nodes, bases) = start_cluster(&dir, 3, 3);
    create_when_led(&bases, PATH);
    for round in 0..8 {
        let l = leader(&bases);
        let f = (l + 1) % 3;
        // Four writers append to the leader until it dies (so commits come in batches); the
        // furthest acknowledged end is remembered.
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let (stop, acked, base) = (stop.clone(), acked.clone(), bases[l].clone());
                std::thread::spawn(move || {
                    let octet = [("content-type", "application/octet-stream")];
                    while !stop.load(Ordering::SeqCst) {
                        let url = format!("{base}{PATH}");
                        match send_url("POST", &url, &octet, b"0123456789|") {
                            Some((200 | 204, hs, _)) => {
                                if let Some(end) = hs
                                    .get("stream-next-offset")
                                    .and_then(|v| v.parse::<u64>().ok())
                                {
                                    acked.fetch_max(end, Ordering::SeqCst);
                                }
                            }
                            _ => std::thread::sleep(Duration::from_millis(20)),
                        }
                    }
                })
            })
            .collect();
        // The workload's length: the writers run this long before the leader dies under them.
        std::thread::sleep(Duration::from_millis(400));
        nodes[l].kill9();
        nodes[f].kill9();
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            w.join().expect("writer");
        }
        let end = acked.load(Ordering::SeqCst);
        assert!(end > 0, "round {round}: nothing was acknowledged");
        // Read at the acknowledged end from the moment the restarted leader answers (while
        // it is still starting), and until it answers with data: never a 416.
        // Both restarted nodes are asked: the follower's barrier goes to the restarted leader.
        let urls: Vec<String> = [l, f]
            .iter()
            .map(|&i| format!("{}{PATH}?offset={:020}", bases[i], end - 1))
            .collect();
        let body = std::thread::scope(|s| {
            let (restarted, follower) = {
                let (a, b) = if l < f {
                    let (x, y) = nodes.split_at_mut(f);
                    (&mut x[l], &mut y[0])
                } else {
                    let (x, y) = nodes.split_at_mut(l);
                    (&mut y[0], &mut x[f])
                };
                (a, b)
            };
            s.spawn(move || {
                restarted.spawn();
                follower.spawn();
            });
            let quick = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_global(Some(Duration::from_secs(5)))
                .build();
            let quick: ureq::Agent = quick.into();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                assert!(
                    std::time::Instant::now() < deadline,
                    "round {round}: no data at the acknowledged end"
                );
                let mut served = None;
                for url in &urls {
                    if let Ok(mut r) = quick.get(url).call() {
                        let status = r.status().as_u16();
                        assert_ne!(
                            status,
                            416,
                            "round {round}: {url} refused offset {} it had acknowledged",
                            end - 1
                        );
                        if status == 200 && served.is_none() {
                            served = Some(r.body_mut().read_to_string().unwrap_or_default());
                        }
                    }
                }
                if let Some(body) = served {
                    break body;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        // Appends in flight when it died may have committed after the last acknowledged one.
        assert!(body.starts_with('|'), "round {round}: {body:?}");
    }
}
