//! Tenant lifecycle against real nodes: the usage ledger on both planes, the bucket purge on
//! a 3-voter cluster with the S3 cold tier on SeaweedFS, and a group exported from one node
//! imported into an empty one through the admin plane's backup routes.

use std::path::Path;

use crate::harness::cluster::*;
use ursula_cold::testing::ACCESS_KEY_ID;
use ursula_cold::testing::BUCKET;
use ursula_cold::testing::SECRET_ACCESS_KEY;
use ursula_cold::testing::SeaweedFs;

const OCTET: (&str, &str) = ("content-type", "application/octet-stream");

/// `OCTET` as [`send`] takes headers.
fn octet() -> [(&'static str, String); 1] {
    [(OCTET.0, OCTET.1.to_owned())]
}

fn incarnation(n: &Proc) -> String {
    metrics(&n.base())["process_incarnation"]
        .as_str()
        .expect("process_incarnation")
        .to_owned()
}

fn admin(n: &Proc, method: &str, path: &str, body: &[u8]) -> Answer {
    let inc = incarnation(n);
    send_url(
        method,
        &n.admin_url(path),
        &[("x-ursula-process-incarnation", &inc)],
        body,
    )
    .expect("admin plane answers")
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).expect("json body")
}

fn usage(url: &str) -> serde_json::Value {
    let (status, _, body) = send_url("GET", url, &[], b"").expect("usage");
    assert_eq!(status, 200);
    json(&body)
}

fn status_of(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> u16 {
    send_url(method, url, headers, body).map_or(0, |a| a.0)
}

#[test]
fn usage_counts_each_committed_write_once_in_write_units_on_both_planes() {
    let dir = tempfile_dir("usage");
    let port = free_port();
    let node = Proc::start(
        port,
        vec![
            "server".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ],
        dir.join("node.log"),
    );
    let base = node.base();
    // 8,192 bytes: one unit; 16,384: two; a producer's 4,096 and its retry: one, once.
    assert_eq!(
        status_of(
            "PUT",
            &format!("{base}/tenant-a/s1"),
            &[OCTET],
            &[1u8; 8192]
        ),
        201
    );
    assert_eq!(
        status_of(
            "POST",
            &format!("{base}/tenant-a/s1"),
            &[OCTET],
            &[2u8; 16384]
        ),
        204
    );
    let producer = [
        OCTET,
        ("producer-id", "p1"),
        ("producer-epoch", "0"),
        ("producer-seq", "0"),
    ];
    // The first append is new (200); its retry is a duplicate (204).
    for want in [200, 204] {
        let url = format!("{base}/tenant-a/s1");
        assert_eq!(status_of("POST", &url, &producer, &[3u8; 4096]), want);
    }
    // An empty create still costs a unit; an idempotent re-create does not.
    assert_eq!(
        status_of("PUT", &format!("{base}/tenant-b/s2"), &[OCTET], b""),
        201
    );
    assert_eq!(
        status_of("PUT", &format!("{base}/tenant-b/s2"), &[OCTET], b""),
        200
    );

    let client = usage(&node.url("/__ursula/usage"));
    let admin_plane = usage(&node.admin_url("/__ursula/usage"));
    assert_eq!(client, admin_plane, "both planes serve the same document");
    assert_eq!(client["version"], 1);
    assert_eq!(client["write_unit_bytes"], 10240);
    let a = &client["buckets"]["tenant-a"];
    assert_eq!(a["committed_append_bytes"], 8192 + 16384 + 4096, "{client}");
    assert_eq!(a["committed_records"], 3, "{client}");
    assert_eq!(a["committed_write_units"], 4, "{client}");
    assert_eq!(a["retained_bytes"], 8192 + 16384 + 4096);
    assert_eq!(a["stream_count"], 1);
    let b = &client["buckets"]["tenant-b"];
    assert_eq!(b["committed_records"], 1);
    assert_eq!(b["committed_write_units"], 1);
    assert_eq!(b["committed_append_bytes"], 0);

    // A delete lowers the gauges, never the counters.
    assert_eq!(
        status_of("DELETE", &format!("{base}/tenant-a/s1"), &[], b""),
        204
    );
    let after = usage(&node.url("/__ursula/usage"));
    let a = &after["buckets"]["tenant-a"];
    assert_eq!(a["committed_write_units"], 4, "{after}");
    assert_eq!(a["committed_append_bytes"], 8192 + 16384 + 4096);
    assert_eq!(a["retained_bytes"], 0);
    assert_eq!(a["stream_count"], 0);
}

/// `[storage.cold]` on `weed` under `root`, flushing everything every 50 ms.
fn cold_toml(weed: &SeaweedFs, root: &str) -> String {
    format!(
        "[storage.cold]\nbackend = \"s3\"\nroot = \"{root}\"\nflush_size = 1\nflush_interval = \"50ms\"\n\
         [storage.cold.s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
         access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n\
         timeout = \"2s\"\nmax_retries = 0\n",
        weed.endpoint()
    )
}

/// A 3-voter cluster of 4 groups on the cold tier under `root`.
fn cold_cluster(dir: &Path, weed: &SeaweedFs, root: &str) -> Vec<Proc> {
    let ports = [free_port(), free_port(), free_port()];
    let cold = cold_toml(weed, root);
    (0..3)
        .map(|i| start_cluster_node_with(dir, &ports, i, &cold))
        .collect()
}

/// Every group led, seen from every node.
fn wait_led(nodes: &[Proc]) {
    wait_for(60, "every group led on every node", || {
        nodes
            .iter()
            .all(|n| {
                let m = metrics(&n.base());
                let groups = m["raft_groups"].as_array().cloned().unwrap_or_default();
                groups.len() == 4 && groups.iter().all(|g| g["current_leader"].is_u64())
            })
            .then_some(())
    });
}

/// Waits until `path` is whole in the cold tier (read at the leader, following redirects).
fn wait_cold(bases: &[String], path: &str) {
    wait_for(30, "the stream to flush whole", || {
        let (status, hs, _) = send(bases, 0, "HEAD", path, &[], b"")?;
        let num = |k: &str| hs.get(k).and_then(|v| v.parse::<u64>().ok());
        (status == 200 && num("stream-cold-hot-start-offset")? == num("stream-next-offset")?)
            .then_some(())
    });
}

#[tokio::test]
async fn a_bucket_purge_through_any_voter_erases_streams_and_objects_and_fences_the_bucket() {
    let weed = SeaweedFs::start().await;
    let dir = tempfile_dir("purge");
    let mut nodes = cold_cluster(&dir, &weed, "purge");
    wait_led(&nodes);
    let bases: Vec<String> = nodes.iter().map(Proc::base).collect();
    // Streams of two tenants, spread over the groups, every byte flushed to the cold tier.
    for bucket in ["tenant-a", "tenant-b"] {
        for i in 0..6 {
            let path = format!("/{bucket}/s{i}");
            let (status, _, _) = send(&bases, 0, "PUT", &path, &octet(), b"").expect("create");
            assert_eq!(status, 201, "{path}");
            let (status, _, _) =
                send(&bases, 0, "POST", &path, &octet(), &vec![b'x'; 3000 + i]).expect("append");
            assert_eq!(status, 204);
        }
    }
    for bucket in ["tenant-a", "tenant-b"] {
        for i in 0..6 {
            wait_cold(&bases, &format!("/{bucket}/s{i}"));
        }
    }
    let store = weed.store("purge");
    assert!(!store.list("tenant-a").await.expect("list").is_empty());
    let b_objects = store.list("tenant-b").await.expect("list");
    assert!(!b_objects.is_empty());

    // Not on the client plane, and not without the process incarnation.
    assert_eq!(
        status_of(
            "DELETE",
            &nodes[1].url("/__ursula/purge/tenant-a"),
            &[],
            b""
        ),
        404
    );
    assert_eq!(
        status_of(
            "DELETE",
            &nodes[1].admin_url("/__ursula/purge/tenant-a"),
            &[],
            b""
        ),
        428
    );
    let (status, _, body) = admin(&nodes[1], "DELETE", "/__ursula/purge/tenant-a", b"");
    let report = json(&body);
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["bucket"], "tenant-a");
    assert_eq!(report["removed_streams"], 6, "{report}");
    assert!(
        !report["groups_with_streams"]
            .as_array()
            .expect("groups")
            .is_empty()
    );
    assert_eq!(report["cold_gc_complete"], true, "{report}");
    assert_eq!(report["cold_gc_pending_entries"], 0);
    assert_eq!(report["cold_gc_error"], serde_json::Value::Null);
    assert_eq!(report["bucket_prefix_absent"], true);
    assert!(store.list("tenant-a").await.expect("list").is_empty());
    assert_eq!(store.list("tenant-b").await.expect("list"), b_objects);

    // Fenced: the streams are gone and the bucket cannot be used again, on any node.
    for base in &bases {
        let (status, _, _) =
            send(&bases, 0, "GET", "/tenant-a/s0?offset=-1", &[], b"").expect("read");
        assert_eq!(status, 404);
        let (status, _, _) = send(
            std::slice::from_ref(base),
            0,
            "PUT",
            "/tenant-a/new",
            &octet(),
            b"",
        )
        .expect("create");
        assert_eq!(status, 404, "a create in the purged bucket via {base}");
    }
    // The other tenant reads back whole.
    for i in 0..6 {
        let (status, _, got) = send(
            &bases,
            0,
            "GET",
            &format!("/tenant-b/s{i}?offset=-1"),
            &[],
            b"",
        )
        .expect("read");
        assert_eq!(status, 200);
        assert_eq!(got, vec![b'x'; 3000 + i]);
    }
    // The counters stay; the gauges are zero.
    let u = usage(&nodes[0].url("/__ursula/usage"));
    assert_eq!(u["buckets"]["tenant-a"]["committed_records"], 12, "{u}");
    assert_eq!(u["buckets"]["tenant-a"]["stream_count"], 0, "{u}");

    // Idempotent: the same report shape, nothing removed.
    let (status, _, body) = admin(&nodes[2], "DELETE", "/__ursula/purge/tenant-a", b"");
    let again = json(&body);
    assert_eq!(status, 200);
    assert_eq!(again["removed_streams"], 0, "{again}");
    assert_eq!(again["cold_gc_complete"], true);

    // With two voters gone no group can commit: 503 with Retry-After, never a redirect.
    nodes[1].kill9();
    nodes[2].kill9();
    let inc = incarnation(&nodes[0]);
    let slow = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(30)))
        .build();
    let slow: ureq::Agent = slow.into();
    let resp = slow
        .delete(nodes[0].admin_url("/__ursula/purge/tenant-b"))
        .header("x-ursula-process-incarnation", &inc)
        .call()
        .expect("purge answers");
    let status = resp.status().as_u16();
    let hs = resp.headers().clone();
    assert_eq!(status, 503);
    assert!(hs.contains_key("retry-after"), "{hs:?}");
}

fn head_of(base: &str, path: &str) -> std::collections::BTreeMap<String, String> {
    let (status, hs, _) = send_url("HEAD", &format!("{base}{path}"), &[], b"").expect("head");
    assert_eq!(status, 200, "HEAD {path}");
    hs
}

#[test]
fn a_group_exported_from_one_node_imports_into_an_empty_one_with_its_streams_and_producers() {
    let dir = tempfile_dir("import");
    let start = |name: &str| {
        let port = free_port();
        let d = dir.join(name);
        std::fs::create_dir_all(&d).expect("dir");
        Proc::start(
            port,
            single_node_args(&d, port, "[raft]\ngroup_count = 4\n", ""),
            d.join("node.log"),
        )
    };
    let source = start("source");
    let base = source.base();
    let producer = |seq: &'static str| {
        [
            OCTET,
            ("producer-id", "writer"),
            ("producer-epoch", "1"),
            ("producer-seq", seq),
        ]
    };
    wait_for(30, "the source to take writes", || {
        (status_of("PUT", &format!("{base}/demo/plain"), &[OCTET], b"abc") == 201).then_some(())
    });
    assert_eq!(
        status_of(
            "POST",
            &format!("{base}/demo/plain"),
            &producer("0"),
            b"def"
        ),
        200
    );
    assert_eq!(
        status_of(
            "POST",
            &format!("{base}/demo/plain"),
            &producer("1"),
            b"ghi"
        ),
        200
    );
    let ndjson = ("content-type", "application/json");
    assert_eq!(
        status_of(
            "PUT",
            &format!("{base}/demo/json"),
            &[ndjson],
            br#"[{"a":1},{"a":2}]"#
        ),
        201
    );
    let closed = [OCTET, ("stream-closed", "true")];
    assert_eq!(
        status_of("PUT", &format!("{base}/demo/closed"), &closed, b"done"),
        201
    );
    assert_eq!(
        status_of("PUT", &format!("{base}/demo/snap"), &[OCTET], b"0123456789"),
        201
    );
    assert_eq!(
        status_of(
            "PUT",
            &format!("{base}/demo/snap/snapshot/00000000000000000004"),
            &[OCTET],
            b"state@4"
        ),
        204
    );
    let (status, _, body) = send_url(
        "PUT",
        &format!("{base}/demo/snap/retention/00000000000000000004"),
        &[],
        b"",
    )
    .expect("retain");
    assert_eq!(status, 204, "{}", String::from_utf8_lossy(&body));

    // Export every group from the source.
    let mut objects = Vec::new();
    for g in 0..4 {
        let (status, hs, body) = export(&source, g);
        assert_eq!(status, 200);
        assert!(hs.contains_key("x-ursula-backup-commit-index"));
        let obj = ursula_state::backup::GroupObject::decode(&body).expect("decode");
        assert_eq!(obj.raft_group_id, g);
        objects.push(body);
    }
    let (_, _, info) =
        send_url("GET", &source.admin_url("/__ursula/backup/info"), &[], b"").expect("info");
    let info = json(&info);
    assert_eq!(info["format_version"], 3);
    assert_eq!(info["raft_group_count"], 4);

    let target = start("target");
    wait_for(30, "the target to lead its groups", || {
        (metrics(&target.base())["raft_groups"]
            .as_array()
            .is_some_and(|g| g.iter().all(|g| g["current_leader"].is_u64())))
        .then_some(())
    });
    // Another format epoch, or the wrong group, is refused before anything is imported.
    let mut other_epoch = ursula_state::backup::GroupObject::decode(&objects[0]).expect("decode");
    other_epoch.format_epoch = 2;
    let (status, _, body) = admin(
        &target,
        "POST",
        "/__ursula/backup/group/0/import",
        &other_epoch.encode().expect("encode"),
    );
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let (status, _, _) = admin(
        &target,
        "POST",
        "/__ursula/backup/group/1/import",
        &objects[0],
    );
    assert_eq!(status, 400);
    for (g, obj) in objects.iter().enumerate() {
        let (status, _, body) = admin(
            &target,
            "POST",
            &format!("/__ursula/backup/group/{g}/cold-check"),
            obj,
        );
        assert_eq!(status, 200);
        let check = json(&body);
        assert_eq!(check["missing_count"], 0, "{check}");
        let (status, _, body) = admin(
            &target,
            "POST",
            &format!("/__ursula/backup/group/{g}/import"),
            obj,
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    // A group that holds streams now refuses another import.
    let plain_group = (0..4)
        .find(|g| {
            let (_, _, body) = export(&target, *g);
            let state = ursula_state::backup::GroupObject::decode(&body)
                .expect("decode")
                .open(*g, 4)
                .expect("open");
            !state.is_empty()
        })
        .expect("a group with streams");
    let (status, _, _) = admin(
        &target,
        "POST",
        &format!("/__ursula/backup/group/{plain_group}/import"),
        &objects[plain_group as usize],
    );
    assert_eq!(status, 409);

    // The streams came across with their bytes, offsets, state and producers.
    let t = target.base();
    for path in ["/demo/plain", "/demo/json", "/demo/closed", "/demo/snap"] {
        let a = head_of(&base, path);
        let b = head_of(&t, path);
        for k in [
            "stream-next-offset",
            "stream-incarnation",
            "stream-closed",
            "stream-snapshot-offset",
        ] {
            assert_eq!(a.get(k), b.get(k), "{path} {k}");
        }
    }
    let (_, _, got) =
        send_url("GET", &format!("{t}/demo/plain?offset=-1"), &[], b"").expect("read");
    assert_eq!(got, b"abcdefghi");
    assert_eq!(
        status_of(
            "GET",
            &format!("{t}/demo/snap?offset=00000000000000000000"),
            &[],
            b""
        ),
        410
    );
    let (status, _, got) = send_url(
        "GET",
        &format!("{t}/demo/snap/snapshot/00000000000000000004"),
        &[],
        b"",
    )
    .expect("snapshot");
    assert_eq!(status, 200);
    assert_eq!(got, b"state@4");
    // A producer's retry after the restore is a duplicate; its next write continues.
    assert_eq!(
        status_of("POST", &format!("{t}/demo/plain"), &producer("1"), b"ghi"),
        204
    );
    assert_eq!(
        status_of("POST", &format!("{t}/demo/plain"), &producer("2"), b"jkl"),
        200
    );
    let (_, _, got) =
        send_url("GET", &format!("{t}/demo/plain?offset=-1"), &[], b"").expect("read");
    assert_eq!(got, b"abcdefghijkl");
    assert_eq!(
        status_of("POST", &format!("{t}/demo/closed"), &[OCTET], b"more"),
        409
    );
    // The usage counters came along (the target's own new append on top).
    let src = usage(&source.url("/__ursula/usage"));
    let dst = usage(&target.url("/__ursula/usage"));
    let src_records = src["buckets"]["demo"]["committed_records"]
        .as_u64()
        .expect("records");
    assert_eq!(
        dst["buckets"]["demo"]["committed_records"],
        src_records + 1,
        "{src} {dst}"
    );
}

/// `GET /__ursula/backup/group/{group}` on `node`'s admin plane.
fn export(node: &Proc, group: u32) -> Answer {
    send_url(
        "GET",
        &node.admin_url(&format!("/__ursula/backup/group/{group}")),
        &[],
        b"",
    )
    .expect("export")
}
