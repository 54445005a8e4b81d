//! The node manifest every verb reads with `--config`: `{"nodes": [{"id": 1, ...}]}` in JSON,
//! `[[nodes]]` tables in TOML, or `nodes:` in YAML; chosen by extension, sniffed when read
//! from stdin (`-`).
//!
//! Node fields, all optional except `id`: `admin_port` (default 4438) or `admin_url`; `host`,
//! shown in reports; `http_url`, the advertised client/Raft URL; `metrics_url`. Metrics and
//! readiness are read at `metrics_url`, else `http_url`, else the admin URL.
//! `expected_process_incarnation` pins the process a node must be (written by
//! `pin-incarnations`, enforced by every verb through [`crate::session`]). The root
//! `maintenance_fence` and each node's `expected_maintenance_fence` are checked for
//! consistency and carried through. Fields this build does not know are kept, so
//! `pin-incarnations` writes back the manifest it was given plus the pins.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use serde::Serialize;

use crate::CtlError;

/// Admin-plane port when a node names neither `admin_port` nor `admin_url`.
pub const DEFAULT_ADMIN_PORT: u16 = 4438;

/// Fields this build does not interpret, kept for writing the manifest back.
pub type Extra = BTreeMap<String, serde_json::Value>;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub nodes: Vec<NodeEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_fence: Option<MaintenanceFence>,
    #[serde(flatten)]
    pub extra: Extra,
    /// The format the manifest was read in, and is written back in.
    #[serde(skip)]
    pub format: Format,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeEntry {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_url: Option<String>,
    /// The process this node must be; a verb refuses a node whose metrics name another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_process_incarnation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_maintenance_fence: Option<MaintenanceFence>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The spec's maintenance-executor token (`reservation_id:generation:executor_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintenanceFence {
    pub reservation_id: String,
    pub generation: u64,
    pub executor_id: String,
}

impl NodeEntry {
    /// The admin plane: `admin_url`, else `http://{host}:{admin_port}`.
    pub fn admin_url(&self) -> String {
        match &self.admin_url {
            Some(u) => trim(u),
            None => format!(
                "http://{}:{}",
                self.host.as_deref().unwrap_or("127.0.0.1"),
                self.admin_port.unwrap_or(DEFAULT_ADMIN_PORT)
            ),
        }
    }

    /// Where metrics and readiness are read: `metrics_url` > `http_url` > the admin URL.
    pub fn metrics_base(&self) -> String {
        self.metrics_url
            .as_deref()
            .or(self.http_url.as_deref())
            .map_or_else(|| self.admin_url(), trim)
    }

    /// The address shown in reports: `host`, else the host of the URL metrics are read at.
    pub fn display_host(&self) -> String {
        if let Some(h) = &self.host {
            return h.clone();
        }
        let base = self.metrics_base();
        let rest = base.split_once("://").map_or(base.as_str(), |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or(rest);
        match authority.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h.to_owned(),
            _ => authority.to_owned(),
        }
    }
}

fn trim(url: &str) -> String {
    url.trim().trim_end_matches('/').to_owned()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Json,
    Toml,
    Yaml,
}

/// Reads and checks a manifest; `-` reads standard input.
pub fn load(path: &str) -> Result<Manifest, CtlError> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|source| CtlError::ReadManifest {
                path: "<stdin>".into(),
                source,
            })?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|source| CtlError::ReadManifest {
            path: path.to_owned(),
            source,
        })?
    };
    parse(path, &text)
}

/// Parses manifest text; `path` picks the format by extension and names the file in errors.
pub fn parse(path: &str, text: &str) -> Result<Manifest, CtlError> {
    let ext = Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let format = match ext.as_deref() {
        Some("json") => Format::Json,
        Some("toml") => Format::Toml,
        Some("yaml" | "yml") => Format::Yaml,
        _ => sniff(text),
    };
    let bad = |why: String| CtlError::BadManifest {
        path: path.to_owned(),
        why: why.replace('\n', " "),
    };
    let mut manifest: Manifest = match format {
        Format::Json => serde_json::from_str(text).map_err(|e| bad(e.to_string()))?,
        Format::Toml => toml::from_str(text).map_err(|e| bad(e.message().to_owned()))?,
        Format::Yaml => serde_yaml_ng::from_str(text).map_err(|e| bad(e.to_string()))?,
    };
    manifest.format = format;
    check(&manifest).map_err(bad)?;
    Ok(manifest)
}

/// Writes the manifest in the format it was read in.
pub fn render(m: &Manifest) -> Result<String, CtlError> {
    let bad = |why: String| CtlError::Render { why };
    match m.format {
        Format::Json => serde_json::to_string_pretty(m)
            .map(|s| s + "\n")
            .map_err(|e| bad(e.to_string())),
        Format::Toml => toml::to_string(m).map_err(|e| bad(e.to_string())),
        Format::Yaml => serde_yaml_ng::to_string(m).map_err(|e| bad(e.to_string())),
    }
}

/// JSON starts with `{`; TOML has `[[nodes]]` or `key = value` lines; anything else is YAML
/// (`nodes:` and `- id: 1` lines).
fn sniff(text: &str) -> Format {
    let t = text.trim_start();
    if t.starts_with('{') {
        return Format::Json;
    }
    let first = t
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && l != &"---");
    match first {
        Some(l) if l.starts_with('[') || l.contains('=') => Format::Toml,
        _ => Format::Yaml,
    }
}

fn check(m: &Manifest) -> Result<(), String> {
    if m.nodes.is_empty() {
        return Err("`nodes` lists no node".into());
    }
    for (i, n) in m.nodes.iter().enumerate() {
        if n.id == 0 {
            return Err("node ids start at 1".into());
        }
        if m.nodes[..i].iter().any(|o| o.id == n.id) {
            return Err(format!("node {} is listed twice", n.id));
        }
        let urls = [&n.admin_url, &n.http_url, &n.metrics_url];
        for url in urls.into_iter().flatten() {
            if !url.trim().starts_with("http://") {
                return Err(format!(
                    "node {}: {url}: only http:// URLs are supported by this build",
                    n.id
                ));
            }
        }
        if n.expected_process_incarnation
            .as_deref()
            .is_some_and(|p| p.trim().is_empty())
        {
            return Err(format!(
                "node {}: expected_process_incarnation is empty",
                n.id
            ));
        }
        // A fence is all-or-nothing: one token at the root, the same on every node.
        if n.expected_maintenance_fence != m.maintenance_fence {
            return Err(format!(
                "node {}: expected_maintenance_fence differs from the root maintenance_fence",
                n.id
            ));
        }
    }
    if let Some(f) = &m.maintenance_fence {
        let hex32 = |s: &str| {
            s.len() == 32
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex32(&f.reservation_id) || !hex32(&f.executor_id) || f.generation == 0 {
            return Err("maintenance_fence: reservation_id and executor_id must be 32 lowercase hexadecimal characters and generation nonzero".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_start_manifest_reads_metrics_from_http_url() {
        let m = parse(
            "local.json",
            r#"{"nodes": [{"id": 1, "http_url": "http://127.0.0.1:4437", "host": "127.0.0.1"}]}"#,
        )
        .expect("manifest");
        assert_eq!(m.nodes[0].metrics_base(), "http://127.0.0.1:4437");
        assert_eq!(m.nodes[0].display_host(), "127.0.0.1");
    }

    #[test]
    fn toml_and_url_precedence() {
        let m = parse(
            "-",
            "[[nodes]]\nid = 1\nadmin_url = \"http://127.0.0.1:5441/\"\n\
             [[nodes]]\nid = 2\nhost = \"10.0.0.2\"\n\
             [[nodes]]\nid = 3\nhttp_url = \"http://a:1\"\nmetrics_url = \"http://b:2\"\n",
        )
        .expect("manifest");
        assert_eq!(m.nodes[0].metrics_base(), "http://127.0.0.1:5441");
        assert_eq!(m.nodes[1].metrics_base(), "http://10.0.0.2:4438");
        assert_eq!(m.nodes[2].metrics_base(), "http://b:2");
        assert_eq!(m.nodes[2].display_host(), "b");
    }

    #[test]
    fn bad_manifests_are_refused() {
        for bad in [
            r#"{"nodes": []}"#,
            r#"{"nodes": [{"id": 0}]}"#,
            r#"{"nodes": [{"id": 1}, {"id": 1}]}"#,
            r#"{"nodes": [{"id": 1, "http_url": "https://x"}]}"#,
            r#"{"nodes": [{"host": "x"}]}"#,
            r#"{"nodes": [{"id": 1, "expected_process_incarnation": " "}]}"#,
        ] {
            assert!(
                matches!(parse("c.json", bad), Err(CtlError::BadManifest { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse("c.yaml", "nodes: [ {id: 1}"),
            Err(CtlError::BadManifest { .. })
        ));
    }

    const FENCE: &str = r#"{"reservation_id": "0123456789abcdef0123456789abcdef", "generation": 3,
        "executor_id": "fedcba9876543210fedcba9876543210"}"#;

    #[test]
    fn a_fence_must_be_at_the_root_and_on_every_node_alike() {
        let whole = format!(
            r#"{{"maintenance_fence": {FENCE}, "nodes": [{{"id": 1, "expected_maintenance_fence": {FENCE}}},
               {{"id": 2, "expected_maintenance_fence": {FENCE}}}]}}"#
        );
        assert!(parse("c.json", &whole).is_ok());
        let partial = format!(
            r#"{{"maintenance_fence": {FENCE}, "nodes": [{{"id": 1, "expected_maintenance_fence": {FENCE}}}, {{"id": 2}}]}}"#
        );
        assert!(matches!(
            parse("c.json", &partial),
            Err(CtlError::BadManifest { .. })
        ));
        let upper = whole.replace("fedcba", "FEDCBA");
        assert!(matches!(
            parse("c.json", &upper),
            Err(CtlError::BadManifest { .. })
        ));
    }

    #[test]
    fn yaml_is_read_by_extension_and_sniffed_on_stdin() {
        let text = "nodes:\n  - id: 1\n    admin_url: http://127.0.0.1:5441\n  - id: 2\n    host: 10.0.0.2\n";
        for path in ["cluster.yaml", "cluster.yml", "-"] {
            let m = parse(path, text).expect(path);
            assert_eq!(m.format, Format::Yaml, "{path}");
            assert_eq!(m.nodes[0].admin_url(), "http://127.0.0.1:5441");
            assert_eq!(m.nodes[1].metrics_base(), "http://10.0.0.2:4438");
        }
        assert_eq!(
            parse("-", "---\nnodes:\n- id: 3\n")
                .expect("doc start")
                .nodes[0]
                .id,
            3
        );
    }

    /// `pin-incarnations` writes the manifest back: every format must keep the fields this
    /// build does not know, add the pin, and read back the same.
    #[test]
    fn every_format_writes_back_what_it_read_plus_the_pins() {
        for (path, text) in [
            (
                "c.json",
                r#"{"cell": "eu-1", "nodes": [{"id": 1, "http_url": "http://a:1", "zone": "z1"}]}"#,
            ),
            (
                "c.toml",
                "cell = \"eu-1\"\n[[nodes]]\nid = 1\nhttp_url = \"http://a:1\"\nzone = \"z1\"\n",
            ),
            (
                "c.yaml",
                "cell: eu-1\nnodes:\n  - id: 1\n    http_url: http://a:1\n    zone: z1\n",
            ),
        ] {
            let mut m = parse(path, text).expect(path);
            m.nodes[0].expected_process_incarnation = Some("p-42".into());
            let out = render(&m).expect("render");
            let back = parse(path, &out).expect("read back");
            assert_eq!(back.format, m.format);
            assert_eq!(
                back.nodes[0].expected_process_incarnation.as_deref(),
                Some("p-42"),
                "{out}"
            );
            assert_eq!(back.nodes[0].extra["zone"], "z1", "{out}");
            assert_eq!(back.extra["cell"], "eu-1", "{out}");
            assert_eq!(back.nodes[0].metrics_base(), "http://a:1");
        }
    }
}
