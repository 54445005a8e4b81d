//! What the backup tests share: small group states, a backup written from them through a
//! [`Location`], and running the real `ursulactl`.

#![allow(dead_code)]

use std::process::Command;
use std::process::Stdio;

use ursula_ctl::location::Location;
use ursula_state::backup::FORMAT_VERSION;
use ursula_state::backup::GroupObject;
use ursula_state::backup::MANIFEST;
use ursula_state::backup::Manifest;
use ursula_state::backup::ManifestGroup;
use ursula_state::backup::object_key;
use ursula_state::stream::Append;
use ursula_state::stream::Body;
use ursula_state::stream::Command as StreamCommand;
use ursula_state::stream::Create;
use ursula_state::stream::GroupState;

/// The capture time every test object carries.
pub const CAPTURED_MS: u64 = 1_700_000_000_000;

/// A group state of `streams` streams, each created with a few bytes and appended to once.
pub fn state(streams: usize) -> GroupState {
    let mut st = GroupState::default();
    for i in 0..streams {
        let key = format!("demo/s{i}");
        st.apply(
            StreamCommand::Create(Create {
                body: Some(Body::Raw(bytes::Bytes::from_static(b"hello"))),
                ..Create::octet_stream(&key)
            }),
            1_000,
        )
        .expect("create");
        st.apply(
            StreamCommand::Append(Append::octet_stream(
                &key,
                bytes::Bytes::from(vec![i as u8; 3_000]),
            )),
            2_000,
        )
        .expect("append");
    }
    st
}

/// Group `g`'s object of a `count`-group backup, encoded: `g + 1` streams, commit index
/// `10 + g`.
pub fn object(g: u32, count: u32) -> Vec<u8> {
    GroupObject::capture(
        g,
        count,
        10 + u64::from(g),
        1,
        CAPTURED_MS,
        &state(g as usize + 1),
    )
    .expect("capture")
    .encode()
    .expect("encode")
}

/// The manifest entry of `bytes` as group `g`'s object.
pub fn entry(g: u32, bytes: &[u8], count: u32) -> ManifestGroup {
    let obj = GroupObject::decode(bytes).expect("decode");
    let streams = obj.open(g, count).map(|s| s.len() as u64).unwrap_or(0);
    ManifestGroup {
        raft_group_id: g,
        object: object_key(g),
        size: bytes.len() as u64,
        blake3: blake3::hash(bytes).to_hex().to_string(),
        commit_index: obj.commit_index,
        source_node_id: obj.source_node_id,
        stream_count: streams,
    }
}

/// Writes a good `count`-group backup to `loc` and answers its manifest.
pub fn write_backup(loc: &Location, count: u32) -> Manifest {
    let mut groups = Vec::new();
    for g in 0..count {
        let bytes = object(g, count);
        groups.push(entry(g, &bytes, count));
        loc.put(&object_key(g), bytes).expect("put object");
    }
    let m = Manifest {
        format_version: FORMAT_VERSION,
        created_unix_ms: 1_700_000_000_000,
        raft_group_count: count,
        groups,
    };
    write_manifest(loc, &m);
    m
}

pub fn write_manifest(loc: &Location, m: &Manifest) {
    loc.put(MANIFEST, serde_json::to_vec_pretty(m).expect("json"))
        .expect("put manifest");
}

/// Runs the real `ursulactl` with `envs` added; exit code, stdout, stderr.
pub fn ctl(args: &[&str], envs: &[(String, String)]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ursulactl"))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .expect("run ursulactl");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// `ursulactl backup-verify --location loc`, expected to fail: its one stderr line.
pub fn verify_fails(loc: &str, envs: &[(String, String)]) -> String {
    let (code, out, err) = ctl(&["backup-verify", "--location", loc], envs);
    assert_eq!(code, Some(1), "stdout: {out}\nstderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("ursulactl: backup-verify: "), "{err}");
    err
}
