//! The node's planes (Operations, "The admin plane"; Configuration, `server.cluster_listen`):
//! admin mutations only on `server.admin_listen`, metrics and readiness on every plane, and
//! peer RPCs only on `server.cluster_listen` when it is set.

mod raft_common;

use std::time::Duration;

use raft_common::*;

fn status(method: &str, url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let (s, _, body) = send_url(method, url, headers, b"").expect("an answer");
    (s, String::from_utf8_lossy(&body).into_owned())
}

fn incarnation(base: &str) -> String {
    metrics(base)["process_incarnation"]
        .as_str()
        .expect("process_incarnation")
        .to_owned()
}

#[test]
fn admin_mutations_are_served_on_the_admin_plane_only_and_metrics_and_ready_on_both() {
    let dir = tempfile_dir("planes-admin");
    let port = free_port();
    let node = Proc::start(
        port,
        single_node_args(&dir, port, "[raft]\ngroup_count = 2", ""),
        dir.join("node.log"),
    );
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
    let (code, stderr) = refused_start(&refused);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("server.admin_listen"), "{stderr}");
    // `--admin-listen off` wins over the file: the node starts and binds no admin port.
    args.extend(["--admin-listen".into(), "off".into()]);
    let node = Proc::start(port, args, dir.join("node.log"));
    // Ready once its groups have elected: a fresh Raft node answers 503 until then.
    node.wait_ready_until(Duration::from_secs(30), |code, _| code == 200);
    drop(taken);
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
    let mut shared = String::from("[raft]\ngroup_count = 2\n");
    for (i, p) in cluster.iter().enumerate() {
        shared.push_str(&format!(
            "[[raft.peers]]\nnode_id = {}\nurl = \"http://127.0.0.1:{p}\"\n",
            i + 1
        ));
    }
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
                vec![
                    "server".into(),
                    "--config".into(),
                    own.display().to_string(),
                    "--node-id".into(),
                    (i + 1).to_string(),
                    "--listen".into(),
                    format!("127.0.0.1:{}", client[i]),
                ],
                dir.join(format!("n{}.log", i + 1)),
            )
        })
        .collect();
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    // Writes go through: the groups elected leaders over the cluster listeners, and a
    // follower's redirect names the leader's peer URL, which serves the client plane too.
    create_when_led(&bases, "/demo/c");
    let ctype = [("content-type", "application/octet-stream".to_owned())];
    for i in 0..6 {
        let r = send(&bases, i, "POST", "/demo/c", &ctype, b"x").expect("append");
        assert_eq!(r.0, 204, "{}", String::from_utf8_lossy(&r.2));
    }
    assert_eq!(read_all(&bases, "/demo/c"), "xxxxxx");
    for (i, n) in nodes.iter().enumerate() {
        let probe = "/__ursula/raft-rpc/0/probe";
        assert_eq!(status("POST", &n.url(probe), &[]).0, 404, "client plane");
        let on_cluster = format!("http://127.0.0.1:{}{probe}", cluster[i]);
        assert_eq!(status("POST", &on_cluster, &[]).0, 200, "cluster plane");
        assert_eq!(status("GET", &n.url("/__ursula/raft-protocol"), &[]).0, 404);
    }
}
