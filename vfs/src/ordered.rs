//! A JSON object whose keys come out in the order they were written. `serde_json`'s map sorts
//! them (its `preserve_order` feature would change every map in every crate built with this
//! one), so `ursula_status` came out alphabetical, not in the order the spec lists its fields.

use std::fmt;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;

/// Keys and values, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Ordered(pub Vec<(&'static str, Value)>);

/// `ordered!{ "key": expr, ... }`: each value goes through `serde_json::json!`.
#[macro_export]
macro_rules! ordered {
    ($($key:literal : $value:expr),* $(,)?) => {
        $crate::ordered::Ordered(vec![$(($key, serde_json::json!($value))),*])
    };
}

impl Ordered {
    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

impl Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl fmt::Display for Ordered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_come_out_in_the_order_written_with_json_values() {
        let o = ordered! { "offset": "-1", "epoch": 3, "at": Option::<String>::None, "error": serde_json::json!({"kind": "x"}) };
        assert_eq!(
            o.to_string(),
            r#"{"offset":"-1","epoch":3,"at":null,"error":{"kind":"x"}}"#
        );
        assert_eq!(o.get("epoch"), Some(&serde_json::json!(3)));
    }
}
