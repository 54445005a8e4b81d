//! The hosts: one network namespace per node and one for the clients, joined by a bridge that
//! lives in a hub namespace of its own (never in the root namespace: an address of these hosts
//! must never be reached from the root namespace, whose traffic can leave the machine).
//!
//! A partition is a pair of `iptables` DROP rules inside a host's namespace, one for traffic
//! from the peer and one for traffic to it; an egress cut drops only the connections a host
//! opens to its peers; healing flushes them. Every namespace this module
//! makes starts with [`PREFIX`], and [`Net::teardown`] (also run on drop, and at the start of a
//! run for a previous run that was killed) deletes them all, with the processes inside.

use std::process::Command;
use std::process::Stdio;

use thiserror::Error;

/// The prefix of every namespace a run makes.
pub const PREFIX: &str = "uch-";
/// The hub namespace holding the bridge.
const HUB: &str = "uch-hub";
/// The clients' namespace; the workload, the gateway and the orchestrator run in it.
pub const CLIENTS: &str = "uch-c";
/// The clients' address on the bridge.
pub const CLIENT_ADDR: &str = "10.77.0.100";

#[derive(Debug, Error)]
pub enum NetError {
    #[error("`{cmd}` failed: {stderr}")]
    Command { cmd: String, stderr: String },
    #[error("could not run `{cmd}`: {source}")]
    Spawn { cmd: String, source: std::io::Error },
}

/// Runs a command, failing with its stderr when it exits non-zero.
pub fn run(program: &str, args: &[&str]) -> Result<(), NetError> {
    let cmd = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| NetError::Spawn {
            cmd: cmd.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetError::Command {
            cmd,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// The namespace of node `i` (1-based).
pub fn node_ns(i: usize) -> String {
    format!("{PREFIX}n{i}")
}

/// The address of node `i` (1-based).
pub fn node_addr(i: usize) -> String {
    format!("10.77.0.{i}")
}

/// Runs `program args` inside namespace `ns`.
pub fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<(), NetError> {
    let mut all = vec!["netns", "exec", ns, program];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// The hosts of one run; torn down on drop. Only the process that made them (in the root
/// namespace) holds this.
pub struct Net {
    pub nodes: usize,
}

/// The partitions among `nodes` node hosts, set from any namespace.
#[derive(Clone, Copy, Debug)]
pub struct Cuts {
    pub nodes: usize,
}

impl Net {
    /// Makes the hub, `nodes` node hosts and the clients' host, after removing whatever a
    /// previous run left.
    pub fn setup(nodes: usize) -> Result<Net, NetError> {
        teardown_all();
        let net = Net { nodes };
        run("ip", &["netns", "add", HUB])?;
        in_ns(HUB, "ip", &["link", "add", "br0", "type", "bridge"])?;
        in_ns(HUB, "ip", &["link", "set", "br0", "up"])?;
        for i in 1..=nodes {
            attach(&node_ns(i), &format!("n{i}"), &node_addr(i))?;
        }
        attach(CLIENTS, "c", CLIENT_ADDR)?;
        Ok(net)
    }
}

impl Cuts {
    /// Cuts node `a` and node `b` (1-based) off from each other, both ways.
    pub fn cut(&self, a: usize, b: usize) -> Result<(), NetError> {
        for (me, peer) in [(a, b), (b, a)] {
            let addr = node_addr(peer);
            in_ns(
                &node_ns(me),
                "iptables",
                &["-A", "INPUT", "-s", &addr, "-j", "DROP"],
            )?;
            in_ns(
                &node_ns(me),
                "iptables",
                &["-A", "OUTPUT", "-d", &addr, "-j", "DROP"],
            )?;
        }
        Ok(())
    }

    /// Cuts node `node`'s egress to every other node: the TCP connections it opens to their
    /// `port` are dropped, while the connections they open to it (and its answers on them)
    /// and its clients' connections still pass.
    pub fn cut_egress(&self, node: usize, port: u16) -> Result<(), NetError> {
        let port = port.to_string();
        for peer in (1..=self.nodes).filter(|p| *p != node) {
            let addr = node_addr(peer);
            in_ns(
                &node_ns(node),
                "iptables",
                &[
                    "-A", "OUTPUT", "-p", "tcp", "-d", &addr, "--dport", &port, "-j", "DROP",
                ],
            )?;
        }
        Ok(())
    }

    /// Cuts node `node` off from the S3 store on the clients' host at `port`: the
    /// connections it opens there are dropped.
    pub fn cut_s3(&self, node: usize, port: u16) -> Result<(), NetError> {
        in_ns(
            &node_ns(node),
            "iptables",
            &[
                "-A",
                "OUTPUT",
                "-p",
                "tcp",
                "-d",
                CLIENT_ADDR,
                "--dport",
                &port.to_string(),
                "-j",
                "DROP",
            ],
        )
    }

    /// Removes every cut.
    pub fn heal(&self) -> Result<(), NetError> {
        for i in 1..=self.nodes {
            in_ns(&node_ns(i), "iptables", &["-F"])?;
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        teardown_all();
    }
}

/// Joins namespace `ns` (made here) to the bridge at `addr`; `tag` names the links.
fn attach(ns: &str, tag: &str, addr: &str) -> Result<(), NetError> {
    run("ip", &["netns", "add", ns])?;
    let hub_end = format!("uch{tag}h");
    run(
        "ip",
        &[
            "link", "add", &hub_end, "netns", HUB, "type", "veth", "peer", "name", "eth0", "netns",
            ns,
        ],
    )?;
    in_ns(HUB, "ip", &["link", "set", &hub_end, "master", "br0"])?;
    in_ns(HUB, "ip", &["link", "set", &hub_end, "up"])?;
    in_ns(
        ns,
        "ip",
        &["addr", "add", &format!("{addr}/24"), "dev", "eth0"],
    )?;
    in_ns(ns, "ip", &["link", "set", "eth0", "up"])?;
    in_ns(ns, "ip", &["link", "set", "lo", "up"])?;
    Ok(())
}

/// Kills every process in every namespace a run makes, then deletes the namespaces (their
/// links go with them).
pub fn teardown_all() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    for ns in list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
    {
        if let Ok(pids) = Command::new("ip").args(["netns", "pids", ns]).output() {
            for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", ns]).status();
    }
}
