//! The node manifest every verb reads with `--config`: `{"nodes": [{"id": 1, ...}]}` in JSON,
//! or `[[nodes]]` tables in TOML; chosen by extension, sniffed when read from stdin (`-`).
//!
//! Node fields, all optional except `id`: `admin_port` (default 4438) or `admin_url`; `host`,
//! shown in reports; `http_url`, the advertised client/Raft URL; `metrics_url`. Metrics and
//! readiness are read at `metrics_url`, else `http_url`, else the admin URL. Other fields of
//! the spec's manifest (process incarnations, maintenance fences) are accepted and ignored by
//! the verbs this build runs.

use std::io::Read;
use std::path::Path;

use serde::Deserialize;

use crate::CtlError;

/// Admin-plane port when a node names neither `admin_port` nor `admin_url`.
pub const DEFAULT_ADMIN_PORT: u16 = 4438;

#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    pub nodes: Vec<NodeEntry>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NodeEntry {
    pub id: u64,
    #[serde(default)]
    pub admin_port: Option<u16>,
    #[serde(default)]
    pub admin_url: Option<String>,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub http_url: Option<String>,
    #[serde(default)]
    pub metrics_url: Option<String>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Toml,
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
        Some("yaml" | "yml") => {
            return Err(CtlError::YamlManifest {
                path: path.to_owned(),
            });
        }
        _ => sniff(text).ok_or_else(|| CtlError::YamlManifest {
            path: path.to_owned(),
        })?,
    };
    let bad = |why: String| CtlError::BadManifest {
        path: path.to_owned(),
        why,
    };
    let manifest: Manifest = match format {
        Format::Json => serde_json::from_str(text).map_err(|e| bad(e.to_string()))?,
        Format::Toml => toml::from_str(text).map_err(|e| bad(e.message().to_owned()))?,
    };
    check(&manifest).map_err(bad)?;
    Ok(manifest)
}

/// JSON starts with `{`; TOML has `[[nodes]]` or `key = value` lines; anything else is taken
/// for YAML.
fn sniff(text: &str) -> Option<Format> {
    let t = text.trim_start();
    if t.starts_with('{') {
        return Some(Format::Json);
    }
    let first = t
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))?;
    if first.starts_with('[') || first.contains('=') {
        Some(Format::Toml)
    } else {
        None
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
        assert!(matches!(
            parse("c.yaml", "nodes: []"),
            Err(CtlError::YamlManifest { .. })
        ));
        assert!(matches!(
            parse("-", "nodes:\n  - id: 1\n"),
            Err(CtlError::YamlManifest { .. })
        ));
        for bad in [
            r#"{"nodes": []}"#,
            r#"{"nodes": [{"id": 0}]}"#,
            r#"{"nodes": [{"id": 1}, {"id": 1}]}"#,
            r#"{"nodes": [{"id": 1, "http_url": "https://x"}]}"#,
            r#"{"nodes": [{"host": "x"}]}"#,
        ] {
            assert!(
                matches!(parse("c.json", bad), Err(CtlError::BadManifest { .. })),
                "{bad}"
            );
        }
    }
}
