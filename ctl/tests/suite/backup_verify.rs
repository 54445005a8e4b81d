//! `ursulactl backup-verify` over local-directory backups built here from small group states:
//! each check fails on its own defect and names it.

use crate::harness::backup::*;
use ursula_ctl::location::Location;
use ursula_state::backup::GroupObject;
use ursula_state::backup::MANIFEST;
use ursula_state::backup::object_key;

fn backup(
    count: u32,
) -> (
    tempfile::TempDir,
    String,
    Location,
    ursula_state::backup::Manifest,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = dir.path().join("backup").display().to_string();
    let loc = Location::open(&spec).expect("location");
    let m = write_backup(&loc, count);
    (dir, spec, loc, m)
}

/// A good `count`-group backup whose manifest `edit` then rewrites: `backup-verify`'s one
/// line of failure.
fn fails_with_manifest(
    count: u32,
    edit: impl FnOnce(&mut ursula_state::backup::Manifest),
) -> String {
    let (_dir, spec, loc, mut m) = backup(count);
    edit(&mut m);
    write_manifest(&loc, &m);
    verify_fails(&spec, &[])
}

#[test]
fn a_good_backup_verifies_and_counts_its_groups_bytes_and_streams() {
    let (_dir, spec, _loc, m) = backup(3);
    let (code, out, err) = ctl(&["backup-verify", "--location", &spec], &[]);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    let bytes: u64 = m.groups.iter().map(|g| g.size).sum();
    // Groups hold 1, 2 and 3 streams.
    assert_eq!(
        out.trim(),
        format!("backup-verify: ok: 3 groups, {bytes} bytes, 6 streams at {spec}")
    );
}

#[test]
fn a_corrupted_byte_in_an_object_fails_naming_blake3_and_the_group() {
    let (_dir, spec, loc, _m) = backup(3);
    let mut bytes = loc.get(&object_key(1)).expect("get").expect("object");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    loc.put(&object_key(1), bytes).expect("put");
    let err = verify_fails(&spec, &[]);
    assert!(err.contains("group 1: blake3"), "{err}");
    assert!(
        !err.contains("group 0:") && !err.contains("group 2:"),
        "{err}"
    );
}

#[test]
fn a_group_missing_from_the_manifest_fails_naming_it() {
    let err = fails_with_manifest(4, |m| m.groups.retain(|g| g.raft_group_id != 3));
    assert!(err.contains("missing group 3"), "{err}");
}

#[test]
fn a_group_listed_twice_fails_naming_it() {
    let err = fails_with_manifest(3, |m| m.groups.push(m.groups[2].clone()));
    assert!(err.contains("group 2 listed twice"), "{err}");
}

#[test]
fn a_group_outside_the_group_count_fails() {
    let err = fails_with_manifest(2, |m| {
        let mut extra = m.groups[1].clone();
        extra.raft_group_id = 7;
        m.groups.push(extra);
    });
    assert!(err.contains("group 7 is outside 0..2"), "{err}");
}

#[test]
fn a_truncated_object_fails_naming_size() {
    let (_dir, spec, loc, _m) = backup(2);
    let mut bytes = loc.get(&object_key(0)).expect("get").expect("object");
    bytes.truncate(bytes.len() - 10);
    loc.put(&object_key(0), bytes).expect("put");
    let err = verify_fails(&spec, &[]);
    assert!(err.contains("group 0: size"), "{err}");
}

#[test]
fn a_missing_object_fails_naming_it() {
    let (dir, spec, _loc, _m) = backup(2);
    std::fs::remove_file(dir.path().join("backup").join(object_key(1))).expect("rm");
    let err = verify_fails(&spec, &[]);
    assert!(
        err.contains(&format!("group 1: object {} is missing", object_key(1))),
        "{err}"
    );
}

#[test]
fn a_manifest_of_format_version_2_fails() {
    let (_dir, spec, loc, _m) = backup(2);
    let text = loc.get(MANIFEST).expect("get").expect("manifest");
    let mut v: serde_json::Value = serde_json::from_slice(&text).expect("json");
    v["format_version"] = 2.into();
    loc.put(MANIFEST, serde_json::to_vec(&v).expect("json"))
        .expect("put");
    let err = verify_fails(&spec, &[]);
    assert!(err.contains("backup manifest format_version 2"), "{err}");
}

#[test]
fn a_location_without_a_manifest_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = dir.path().display().to_string();
    let err = verify_fails(&spec, &[]);
    assert!(err.contains("no manifest.json"), "{err}");
}

#[test]
fn an_object_whose_checksum_was_recomputed_after_corrupting_the_state_fails_the_deep_decode() {
    let (_dir, spec, loc, mut m) = backup(3);
    let bytes = loc.get(&object_key(2)).expect("get").expect("object");
    let mut obj = GroupObject::decode(&bytes).expect("decode");
    // Half a state: the object still decodes, its size and checksum match the manifest, and
    // only decoding the state itself finds the damage.
    obj.state.truncate(obj.state.len() / 2);
    let bad = obj.encode().expect("encode");
    m.groups[2] = entry(2, &bad, 3);
    loc.put(&object_key(2), bad).expect("put");
    write_manifest(&loc, &m);
    let err = verify_fails(&spec, &[]);
    assert!(err.contains("group 2: deep check"), "{err}");
    assert!(err.contains("state does not decode"), "{err}");
    assert!(!err.contains("blake3") && !err.contains("size"), "{err}");
}

#[test]
fn another_groups_object_under_a_groups_entry_fails_the_deep_check() {
    let (_dir, spec, loc, mut m) = backup(3);
    // Group 1's valid object, listed (with its own size and checksum) as group 0's.
    let other = loc.get(&object_key(1)).expect("get").expect("object");
    let mut e = entry(1, &other, 3);
    e.raft_group_id = 0;
    e.object = object_key(0);
    m.groups[0] = e;
    loc.put(&object_key(0), other).expect("put");
    write_manifest(&loc, &m);
    let err = verify_fails(&spec, &[]);
    assert!(
        err.contains("group 0: deep check: the group object is group 1, expected group 0"),
        "{err}"
    );
}

#[test]
fn every_failure_is_reported_not_only_the_first() {
    let err = fails_with_manifest(4, |m| {
        m.groups.retain(|g| g.raft_group_id != 0);
        m.groups[0].size += 1;
    });
    assert!(err.contains("missing group 0"), "{err}");
    assert!(err.contains("group 1: size"), "{err}");
}
