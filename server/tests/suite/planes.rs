//! The node's planes (Operations, "The admin plane"; Configuration, `server.cluster_listen`):
//! admin mutations only on `server.admin_listen`, metrics and readiness on every plane, and
//! peer RPCs only on `server.cluster_listen` when it is set.

use std::time::Duration;

use crate::harness::cluster::*;
use crate::harness::conn::*;

fn status(method: &str, url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let (s, _, body) = send_url(method, url, headers, b"").expect("an answer");
    (s, String::from_utf8_lossy(&body).into_owned())
}

/// What a peer RPC to node `i + 1` (`i` 0-based) claims: another voter as its sender and that
/// node as its addressee, `(from, to)` as node ids.
fn claimed_peers(i: usize) -> (&'static str, String) {
    (if i == 0 { "2" } else { "1" }, (i + 1).to_string())
}

fn incarnation(base: &str) -> String {
    metrics(base)["process_incarnation"]
        .as_str()
        .expect("process_incarnation")
        .to_owned()
}

#[test]
fn admin_mutations_are_served_on_the_admin_plane_only_and_metrics_and_ready_on_both() {
    let (_dir, node) = single_node("planes-admin", "[raft]\ngroup_count = 2", "");
    let inc = incarnation(&node.base());
    let with = [("x-ursula-process-incarnation", inc.as_str())];
    let accept = "/__ursula/raft/0/recovery/accept-unsynced-loss";
    for url in [node.url(""), node.admin_url("")] {
        assert_eq!(
            status("GET", &format!("{url}/__ursula/metrics"), &[]).0,
            200
        );
        assert_eq!(status("GET", &format!("{url}/__ursula/ready"), &[]).0, 200);
    }
    // The client plane: no admin mutation, whatever the headers; streams as ever.
    assert_eq!(status("POST", &node.url(accept), &with).0, 404);
    assert_eq!(
        status("POST", &node.url("/__ursula/flush-cold/demo/s"), &with).0,
        404
    );
    assert_eq!(status("PUT", &node.url("/demo/s"), &[]).0, 201);
    // The admin plane: the mutation, bound to the observed process; no stream traffic.
    let body = r#"{"expected_last_log_index":null,"expected_current_term":0}"#;
    let post = |headers: &[(&str, &str)]| {
        let (s, _, b) =
            send_url("POST", &node.admin_url(accept), headers, body.as_bytes()).expect("answer");
        (s, String::from_utf8_lossy(&b).into_owned())
    };
    assert_eq!(post(&[]).0, 428);
    assert_eq!(
        post(&[("x-ursula-process-incarnation", "0000000000000000")]).0,
        412
    );
    let (s, text) = post(&with);
    assert_eq!(s, 200, "{text}");
    assert!(text.contains("\"already_open\""), "{text}");
    assert_eq!(status("GET", &node.admin_url("/demo/s"), &[]).0, 404);
    assert_eq!(status("PUT", &node.admin_url("/demo/t"), &[]).0, 404);
}

#[test]
fn a_taken_admin_port_refuses_the_start_by_name_and_off_serves_no_admin_plane() {
    let dir = tempfile_dir("planes-off");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_port = taken.local_addr().expect("addr").port();
    let port = free_port();
    let mut args = single_node_args(
        &dir,
        port,
        &format!("[server]\nadmin_listen = \"127.0.0.1:{taken_port}\"\n[raft]\ngroup_count = 2"),
        "",
    );
    // The file names the taken port (`refused_start` adds no flag of its own to override it).
    let mut refused = args.clone();
    refused.extend(["--admin-listen".into(), format!("127.0.0.1:{taken_port}")]);
    let stderr = refusal(&refused);
    assert!(stderr.contains("server.admin_listen"), "{stderr}");
    // `--admin-listen off` wins over the file: the node starts and binds no admin port.
    args.extend(["--admin-listen".into(), "off".into()]);
    let node = Proc::start(port, args, dir.join("node.log"));
    // Ready once its groups have elected: a fresh Raft node answers 503 until then.
    node.wait_ready_until(Duration::from_secs(30), |code, _| code == 200);
    drop(taken);
    // A window for the node to take the freed port, which it must not.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", taken_port)).is_err(),
        "nothing listens on the admin port once it is off"
    );
}

#[test]
fn a_cluster_with_cluster_listeners_forms_there_and_serves_peer_rpcs_only_there() {
    let dir = tempfile_dir("planes-cluster");
    let client: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let cluster: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let shared = format!("[raft]\ngroup_count = 2\n{}", peer_entries(&cluster));
    let nodes: Vec<Proc> = (0..3)
        .map(|i| {
            let own = dir.join(format!("n{}.toml", i + 1));
            std::fs::write(
                &own,
                format!(
                    "[server]\ncluster_listen = \"127.0.0.1:{}\"\n{shared}[raft.wal]\npath = \"{}\"\n",
                    cluster[i],
                    dir.join(format!("wal{}", i + 1)).display()
                ),
            )
            .expect("toml");
            Proc::start(
                client[i],
                node_args(&own, i, client[i]),
                dir.join(format!("n{}.log", i + 1)),
            )
        })
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    // Writes go through: the groups elected leaders over the cluster listeners, and a
    // follower's redirect names the leader's peer URL, which serves the client plane too.
    create_when_led(&bases, "/demo/c");
    for i in 0..6 {
        let r = send_octets(&bases, i, "/demo/c", b"x").expect("append");
        assert_eq!(r.0, 204, "{}", String::from_utf8_lossy(&r.2));
    }
    assert_eq!(read_all(&bases, "/demo/c"), "xxxxxx");
    for (i, n) in nodes.iter().enumerate() {
        let probe = "/__ursula/raft-rpc/0/probe";
        assert_eq!(status("POST", &n.url(probe), &[]).0, 404, "client plane");
        let on_cluster = format!("http://127.0.0.1:{}{probe}", cluster[i]);
        let (from, to) = claimed_peers(i);
        let from_peer = [
            ("x-ursula-raft-from", from),
            ("x-ursula-raft-to", to.as_str()),
        ];
        assert_eq!(
            status("POST", &on_cluster, &from_peer).0,
            200,
            "cluster plane"
        );
        assert_eq!(status("GET", &n.url("/__ursula/raft-protocol"), &[]).0, 404);
        // The egress probe answers on both planes, and each node's gate, probing its peers'
        // cluster listeners, finds its egress healthy.
        let beat = [0u8; 64];
        for url in [
            n.url("/__ursula/cluster-probe"),
            format!("http://127.0.0.1:{}/__ursula/cluster-probe", cluster[i]),
        ] {
            let (s, _, _) = send_url("POST", &url, &[], &beat).expect("an answer");
            assert_eq!(s, 204, "{url}");
        }
        assert_eq!(metrics(&n.base())["leadership_shed"]["state"], "none");
    }
}

#[test]
fn the_cluster_probe_answers_a_heartbeat_from_anyone_and_nothing_larger_or_else() {
    let (_dir, node) = single_node("planes-probe", "[raft]\ngroup_count = 2", "");
    let url = node.url("/__ursula/cluster-probe");
    let post = |body: &[u8]| send_url("POST", &url, &[], body).expect("an answer");
    let (s, _, body) = post(&[7u8; 64]);
    assert_eq!((s, body.len()), (204, 0), "a heartbeat, and nothing told");
    assert_eq!(post(b"").0, 204);
    assert_eq!(post(&[7u8; 1024]).0, 204);
    // A stranger cannot push a body through it, nor use it for anything but the probe.
    let (s, _, body) = post(&[7u8; 1025]);
    assert_eq!(s, 413, "{}", String::from_utf8_lossy(&body));
    let (s, headers, _) = send_url("GET", &url, &[], b"").expect("an answer");
    assert_eq!(s, 405);
    assert_eq!(headers.get("allow").map(String::as_str), Some("POST"));
    assert_eq!(
        status("POST", &node.admin_url("/__ursula/cluster-probe"), &[]).0,
        404
    );
    // Nothing lives below it.
    assert_eq!(
        status("POST", &node.url("/__ursula/cluster-probe/x"), &[]).0,
        404
    );
}

/// A ready single node whose request heads time out after 2 s, with `server` in its `[server]`.
fn node_with_a_head_timeout(name: &str, server: &str) -> (Scratch, Proc) {
    let toml = format!("[server]\nrequest_head_timeout = \"2s\"\n{server}[raft]\ngroup_count = 2");
    let (dir, node) = single_node(name, &toml, "");
    node.wait_ready_until(Duration::from_secs(30), |code, _| code == 200);
    (dir, node)
}

#[test]
fn connections_that_never_finish_a_request_head_are_closed_while_requests_go_on() {
    let (_dir, node) = node_with_a_head_timeout("planes-half-heads", "");
    let port = node.port;
    // Thousands where the machine allows it; the server holds as many descriptors again.
    let count = open_files_limit().saturating_sub(300).clamp(100, 3_000);
    let slow = half_heads(port, "/demo/slow", count);
    // Requests keep being served while every one of those connections is held open.
    assert_eq!(status("PUT", &node.url("/demo/fast"), &[]).0, 201);
    for i in 0..20 {
        let (s, _, _) = send_url(
            "POST",
            &node.url("/demo/fast"),
            &[("content-type", "application/octet-stream")],
            format!("row {i}").as_bytes(),
        )
        .expect("an answer");
        assert_eq!(s, 204, "append {i} while {count} half heads are open");
    }
    // Without the head timeout they stay open for good: the reads below give up, all within
    // one 30 s deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let still_open = slow
        .iter()
        .filter(|s| {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            !closed_by_peer(s, left.max(Duration::from_millis(10)))
        })
        .count();
    assert_eq!(
        still_open, 0,
        "{still_open} of {count} half heads still open"
    );
    assert_eq!(status("GET", &node.url("/demo/fast?offset=-1"), &[]).0, 200);
}

#[test]
fn at_the_connection_cap_a_new_connection_waits_for_a_slot_and_is_then_served() {
    let (_dir, node) = node_with_a_head_timeout("planes-cap", "max_connections = 4\n");
    let port = node.port;
    // Every core's loop may hold one accepted slot's worth: fill the cap with half heads.
    let slow = half_heads(port, "/demo/slow", 4);
    // The cap is per listener: the admin plane still answers.
    assert_eq!(
        status("GET", &node.admin_url("/__ursula/ready"), &[]).0,
        200
    );
    // This one waits in the backlog until the head timeout frees a slot, then is served.
    assert_eq!(status("PUT", &node.url("/demo/capped"), &[]).0, 201);
    for s in &slow {
        assert!(closed_by_peer(s, Duration::from_secs(30)));
    }
}

/// `{"Purge": ["victim", false]}`: the operator's bucket purge as the state machine reads it,
/// the body a stranger sent to the `propose` peer RPC to erase a bucket.
const PURGE_VICTIM: &[u8] = b"\x81\xa5Purge\x92\xa6victim\xc2";

/// Creates `/victim/s1` holding `x` and returns its path.
fn victim_stream(bases: &[String]) -> &'static str {
    create_when_led(bases, "/victim/s1");
    let r = send_octets(bases, 0, "/victim/s1", b"x").expect("append");
    assert_eq!(r.0, 204, "{}", String::from_utf8_lossy(&r.2));
    "/victim/s1"
}

/// Sends the purge to every group of the node at `base` with `headers`; returns each status.
fn forged_purges(base: &str, groups: u32, headers: &[(&str, &str)]) -> Vec<u16> {
    (0..groups)
        .map(|g| {
            let url = format!("{base}/__ursula/raft-rpc/{g}/propose");
            send_url("POST", &url, headers, PURGE_VICTIM)
                .expect("answer")
                .0
        })
        .collect()
}

#[test]
fn a_stranger_on_a_single_nodes_client_port_cannot_purge_a_bucket_through_the_propose_rpc() {
    // The Docker image's shape: one Raft node, its peer routes on the client listener.
    let (_dir, node) = single_node("planes-propose-single", "[raft]\ngroup_count = 4", "");
    let bases = [node.base()];
    let path = victim_stream(&bases);
    // Bare, and claiming to be a peer: a single node has none, so it takes no RPC at all.
    for headers in [
        &[][..],
        &[("x-ursula-raft-from", "2"), ("x-ursula-raft-to", "1")][..],
    ] {
        let statuses = forged_purges(&node.base(), 4, headers);
        assert!(statuses.iter().all(|s| *s == 421), "{statuses:?}");
    }
    assert_eq!(read_all(&bases, path), "x", "the bucket survives");
}

#[test]
fn a_cluster_without_a_peer_secret_takes_no_operator_command_over_its_peer_routes() {
    let dir = tempfile_dir("planes-propose-open");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    // Four groups: what the harness's leadership helpers expect; leaderships stay where the
    // test puts them (no fair-share balancer).
    let shared = format!(
        "[raft]\ngroup_count = 4\ninit_membership_per_group = true\n{}\
         [governance.leadership_balance]\nmax_per_tick = 0\n",
        peer_entries(&ports)
    );
    let nodes: Vec<Proc> = (0..3)
        .map(|i| {
            let own = dir.join(format!("n{}.toml", i + 1));
            let wal = dir.join(format!("wal{}", i + 1));
            let text = format!("{shared}[raft.wal]\npath = \"{}\"\n", wal.display());
            std::fs::write(&own, text).expect("toml");
            let args = node_args(&own, i, ports[i]);
            Proc::start(ports[i], args, dir.join(format!("n{}.log", i + 1)))
        })
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    let path = victim_stream(&bases);
    // A stranger who names a real sender and addressee still cannot have a leader propose an
    // operator command: without a secret, nothing proves the sender is a peer.
    for (i, n) in nodes.iter().enumerate() {
        let (from, to) = claimed_peers(i);
        let headers = [
            ("x-ursula-raft-from", from),
            ("x-ursula-raft-to", to.as_str()),
        ];
        let statuses = forged_purges(&n.base(), 4, &headers);
        assert!(statuses.iter().all(|s| *s == 403), "{statuses:?}");
    }
    assert_eq!(read_all(&bases, path), "x", "the bucket survives");
    // The operator's purge on a node that leads no group needs the secret to reach the
    // leader, and says so; on the leader's own admin plane it goes through.
    lead_all_on(&nodes, 2);
    let (status, text) = admin(&nodes[0], "DELETE", "/__ursula/purge/victim");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("peer secret"), "{text}");
    assert_eq!(read_all(&bases, path), "x", "nothing purged yet");
    let (status, text) = admin(&nodes[1], "DELETE", "/__ursula/purge/victim");
    assert_eq!(status, 200, "{text}");
    // The purge answered once a quorum applied it; a follower outside that quorum applies it
    // a moment later, so each node is read until it says the stream is gone.
    purged_everywhere(&bases, path);
}

#[test]
fn a_cluster_with_a_peer_secret_refuses_every_peer_rpc_without_it_and_forwards_purges_with_it() {
    let dir = tempfile_dir("planes-secret");
    let (_, nodes, bases) = start_cluster(&dir, 3, 3);
    let path = victim_stream(&bases);
    let wrong = PEER_SECRET.replace('0', "1");
    for (i, n) in nodes.iter().enumerate() {
        let (from, to) = claimed_peers(i);
        let claims = [
            ("x-ursula-raft-from", from),
            ("x-ursula-raft-to", to.as_str()),
        ];
        for secret in [None, Some(wrong.as_str())] {
            let mut headers = claims.to_vec();
            headers.extend(secret.map(|s| (SECRET_HEADER, s)));
            // Every kind, the batch, and the purge: refused before the body is read.
            for kind in [
                "append",
                "vote",
                "snapshot",
                "barrier",
                "probe",
                "elect",
                "propose",
                "read-index",
            ] {
                let url = n.url(&format!("/__ursula/raft-rpc/0/{kind}"));
                let (status, _, body) =
                    send_url("POST", &url, &headers, PURGE_VICTIM).expect("answer");
                let text = String::from_utf8_lossy(&body);
                assert_eq!(status, 401, "{kind}: {text}");
                assert!(text.contains("peer secret"), "{text}");
            }
            let batch = n.url("/__ursula/raft-rpc-batch");
            assert_eq!(
                send_url("POST", &batch, &headers, b"\x90")
                    .expect("answer")
                    .0,
                401
            );
        }
        assert!(
            !n.log_text().contains(PEER_SECRET) && !n.log_text().contains(&wrong),
            "no secret in the log"
        );
    }
    assert_eq!(read_all(&bases, path), "x", "the bucket survives");
    // The operator's purge, on a node that leads no group, reaches the leader with the secret.
    lead_all_on(&nodes, 2);
    let (status, text) = admin(&nodes[0], "DELETE", "/__ursula/purge/victim");
    assert_eq!(status, 200, "{text}");
    // The purge answered once a quorum applied it; a follower outside that quorum applies it
    // a moment later, so each node is read until it says the stream is gone.
    purged_everywhere(&bases, path);
}

/// The status line's code of a raw `GET {path}` to `port` naming `host`.
fn raw_get_status(port: u16, path: &str, host: &str) -> u16 {
    use std::io::Read;
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("answer");
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line")
}

#[test]
fn the_admin_plane_refuses_a_host_name_it_was_not_given_as_dns_rebinding_would_send() {
    let dir = tempfile_dir("planes-admin-host");
    let toml = "[server]\nadmin_hosts = [\"ursula-1.admin.test\"]\n[raft]\ngroup_count = 2";
    let node = start_single_node(&dir, toml, "");
    let port = node.port;
    let admin = node.admin_port;
    for host in [
        "evil.example:4438",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
    ] {
        assert_eq!(
            raw_get_status(admin, "/__ursula/metrics", host),
            403,
            "{host}"
        );
    }
    for host in [
        format!("127.0.0.1:{admin}"),
        format!("localhost:{admin}"),
        "ursula-1.admin.test".to_owned(),
    ] {
        assert_eq!(
            raw_get_status(admin, "/__ursula/metrics", &host),
            200,
            "{host}"
        );
    }
    // The client plane is not the admin plane: any name reaches the streams.
    assert_eq!(raw_get_status(port, "/__ursula/ready", "evil.example"), 200);
}

/// Waits until every node answers `404` for `path`: each applied the purge.
fn purged_everywhere(bases: &[String], path: &str) {
    for i in 0..bases.len() {
        wait_for(10, &format!("node {} to apply the purge", i + 1), || {
            let r = send(bases, i, "GET", &format!("{path}?offset=-1"), &[], b"").expect("read");
            (r.0 == 404).then_some(())
        });
    }
}
