//! Hash maps encoded in key order. A snapshot of a group encodes its state; with the maps in
//! iteration order, two replicas holding the same state (or one replica, twice) wrote different
//! bytes, so snapshot bytes could not be compared or pinned by a fixture.

use std::collections::HashMap;
use std::hash::BuildHasher;

use serde::Serialize;
use serde::Serializer;
use serde::ser::SerializeMap;

/// Serializes `m` as a map whose entries come in key order.
pub fn map<K, V, H, S>(m: &HashMap<K, V, H>, s: S) -> Result<S::Ok, S::Error>
where
    K: Serialize + Ord,
    V: Serialize,
    H: BuildHasher,
    S: Serializer,
{
    let mut entries: Vec<(&K, &V)> = m.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = s.serialize_map(Some(entries.len()))?;
    for (k, v) in entries {
        out.serialize_entry(k, v)?;
    }
    out.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Holder {
        #[serde(serialize_with = "map")]
        m: HashMap<String, u32>,
    }

    #[test]
    fn equal_maps_encode_to_equal_bytes_whatever_their_insertion_order() {
        let a: HashMap<String, u32> = (0..50).map(|i| (format!("k{i}"), i)).collect();
        let b: HashMap<String, u32> = (0..50).rev().map(|i| (format!("k{i}"), i)).collect();
        let enc = |m| rmp_serde::to_vec(&Holder { m }).expect("encode");
        assert_eq!(enc(a), enc(b));
    }
}
