//! A cluster node whose WAL disk comes under pressure refuses every write it would lead, so it
//! sheds leadership: it hands the leaderships it holds to its peers, campaigns for no group,
//! refuses transfers to itself and reports `wal-disk-pressure` in its leadership-shed state,
//! while the cluster keeps taking writes through the other voters; once the disk has room it
//! may lead again. The pressure is real: node 3's free-space thresholds sit a little below the
//! filesystem's free space at the start, and a file whose blocks are allocated (fallocate)
//! takes it under them, then gives the room back when it is deleted.

use std::path::Path;
use std::path::PathBuf;

use crate::harness::cluster::*;
use fs4::FileExt;

const GIB: u64 = 1 << 30;

/// Deletes the filler however the test ends: it holds gigabytes.
struct Filler(PathBuf);

impl Filler {
    fn allocate(path: PathBuf, len: u64) -> Filler {
        let f = std::fs::File::create(&path).expect("filler");
        let filler = Filler(path);
        f.allocate(len).expect("allocate the filler's blocks");
        filler
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A 3-voter cluster (4 groups) whose node 3 sees pressure once `dir`'s filesystem loses
/// 1.5 GiB and room again once it is back within 0.75 GiB of what it has now.
fn cluster(dir: &Path, ports: &[u16]) -> Vec<Proc> {
    let free = fs4::available_space(dir).expect("free space");
    assert!(
        free > 4 * GIB,
        "the test needs 4 GiB free under {}",
        dir.display()
    );
    (0..3)
        .map(|i| {
            let args = cluster_node_args(dir, ports, i);
            if i == 2 {
                // The node's own config file ends in its `[raft.wal]` table.
                let own = dir.join("n3.toml");
                let mut text = std::fs::read_to_string(&own).expect("n3.toml");
                text.push_str(&format!(
                    "min_available_size = {}\nresume_available_size = {}\n",
                    free - 3 * GIB / 2,
                    free - 3 * GIB / 4
                ));
                std::fs::write(&own, text).expect("n3.toml");
            }
            Proc::start(ports[i], args, dir.join(format!("n{}.log", i + 1)))
        })
        .collect()
}

fn pressure(node: &Proc) -> bool {
    metrics(&node.base())["wal_disk_pressure"] == true
}

#[test]
fn a_node_short_of_wal_disk_hands_its_leaderships_away_takes_none_and_leads_again_with_room() {
    let dir = tempfile_dir("wal-disk-shed");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let nodes = cluster(&dir, &ports);
    // Node 3 leads every group.
    lead_all_on(&nodes, 3);
    assert!(!pressure(&nodes[2]));

    let filler = Filler::allocate(dir.join("filler"), 3 * GIB);
    wait_for(10, "node 3 to see its WAL disk pressure", || {
        pressure(&nodes[2]).then_some(())
    });
    let led = wait_for(60, "every group handed to a node with room", || {
        leaders(&nodes).filter(|l| l.iter().all(|l| *l == 1 || *l == 2))
    });
    let log = nodes[2].log_text();
    assert!(
        log.contains("this node hands its leaderships to peers"),
        "{log}"
    );
    assert!(log.contains("leadership handed off"), "{log}");
    assert_eq!(shed_state(&nodes[2])["state"], "wal-disk-pressure");
    // A transfer to it is refused, and so is its own campaign, naming why.
    assert_third_node_sheds(&nodes, led[0], 8, "wal-disk-pressure");
    let (status, body) = admin(&nodes[2], "POST", "/__ursula/raft/1/self-election");
    assert_ne!(status, 200, "{body}");
    assert!(body.contains("wal-disk-pressure"), "{body}");
    // The cluster still takes writes, through the voters with room.
    assert_writable_through_the_first_two(&nodes, "/demo/disk");

    // Room again: the node may lead, and takes a transfer.
    drop(filler);
    wait_for(10, "node 3 to see room on its WAL disk", || {
        (!pressure(&nodes[2])).then_some(())
    });
    wait_for(10, "node 3's shed state to clear", || {
        (shed_state(&nodes[2])["state"] == "none").then_some(())
    });
    assert_third_node_takes_a_transfer(&nodes);
    drop(nodes);
}
