//! The snapshot-store health gate against real S3 servers: node 3 of a 3-voter cluster keeps
//! its cold tier on a SeaweedFS of its own, which the test freezes (SIGSTOP, so its probes and
//! writes hang past their deadlines, the way a hung store looks). After
//! `storage.cold.s3.unhealthy_ticks` bad ticks node 3 reports `snapshot-store-unhealthy`, hands
//! every leadership to the voters whose store answers and refuses to take one back, while the
//! cluster keeps taking writes; once the store answers again, `heal_ticks` good ticks later it
//! may lead again.

use std::path::Path;

use crate::harness::cluster::*;
use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;

/// The cold tier on `weed`, a gate ticking every 300 ms with a 200 ms probe deadline.
fn store_toml(weed: &SeaweedFs) -> String {
    format!(
        "[storage.cold]\nbackend = \"s3\"\nroot = \"gate\"\nflush_size = 1\nflush_interval = \"50ms\"\n\
         [storage.cold.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
         access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n\
         server_side_encryption = \"aes256\"\ntimeout = \"1s\"\nmax_retries = 0\n\
         probe_timeout = \"200ms\"\nunhealthy_ticks = 3\nheal_ticks = 2\n\
         [storage.snapshot]\ndrive_interval = \"300ms\"\n",
        weed.endpoint()
    )
}

/// A 3-voter cluster (4 groups): nodes 1 and 2 on `shared`'s store, node 3 on `own`.
fn cluster(dir: &Path, ports: &[u16], shared: &SeaweedFs, own: &SeaweedFs) -> Vec<Proc> {
    (0..3)
        .map(|i| {
            let args = cluster_node_args(dir, ports, i);
            let path = dir.join(format!("n{}.toml", i + 1));
            let mut text = std::fs::read_to_string(&path).expect("node toml");
            text.push_str(&store_toml(if i == 2 { own } else { shared }));
            std::fs::write(&path, text).expect("node toml");
            Proc::start(ports[i], args, dir.join(format!("n{}.log", i + 1)))
        })
        .collect()
}

#[tokio::test]
async fn a_node_whose_store_hangs_hands_its_leaderships_away_and_leads_again_once_it_answers() {
    let shared = SeaweedFs::start().await;
    let own = SeaweedFs::start().await;
    let dir = tempfile_dir("store-gate");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let nodes = cluster(&dir, &ports, &shared, &own);
    lead_all_on(&nodes, 3);
    // Healthy ticks keep it leading: nothing sheds while the store answers.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(shed_state(&nodes[2])["state"], "none");
    assert!(leaders(&nodes).is_some_and(|l| l.iter().all(|l| *l == 3)));

    own.freeze();
    wait_for(30, "node 3 to judge its store unhealthy", || {
        (shed_state(&nodes[2])["state"] == "snapshot-store-unhealthy").then_some(())
    });
    let led = wait_for(
        60,
        "every group handed to a node whose store answers",
        || leaders(&nodes).filter(|l| l.iter().all(|l| *l == 1 || *l == 2)),
    );
    let log = nodes[2].log_text();
    assert!(log.contains("snapshot store health tick is bad"), "{log}");
    assert!(log.contains("snapshot store unhealthy"), "{log}");
    assert!(log.contains("no answer within"), "{log}");
    assert_third_node_sheds(&nodes, led[0], 2, "snapshot-store-unhealthy");
    // The cluster still takes writes, through the voters whose store answers.
    assert_writable_through_the_first_two(&nodes, "/demo/gate");

    own.thaw();
    wait_for(30, "node 3's store to be judged healthy again", || {
        (shed_state(&nodes[2])["state"] == "none").then_some(())
    });
    assert!(
        nodes[2]
            .log_text()
            .contains("snapshot store healthy again: this node may lead")
    );
    assert_third_node_takes_a_transfer(&nodes);
    drop(nodes);
}
