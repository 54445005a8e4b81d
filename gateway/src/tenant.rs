//! Per-tenant limits and usage around one request: the `--quota-policy` and `--usage-*`
//! flags, the admission of a request once access control has placed it in a bucket, and the
//! counting of what it carried once it was forwarded.
//!
//! Both work with or without access control. Without it a request's bucket is the first
//! segment of its path and every caller is anonymous, which suits a gateway on a trusted
//! network that still wants one tenant kept from starving the others.

use std::net::IpAddr;
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use http::Response;
use http::request::Parts;

use crate::admission::Admission;
use crate::admission::AdmissionRejection;
use crate::admission::Pass;
use crate::admission::QuotaPolicy;
use crate::admission::QuotaPolicyError;
use crate::admission::UploadGuard;
use crate::auth;
use crate::auth::Admitted;
use crate::reply;
use crate::reply::GatewayBody;
use crate::reply::GatewayRefusal;
use crate::reply::Mark;
use crate::usage::ActionClass;
use crate::usage::Metered;
use crate::usage::Usage;
use crate::usage::UsageConfig;
use crate::usage::UsageKey;

/// `--usage-flush-secs` when not given.
pub const DEFAULT_USAGE_FLUSH_SECS: u64 = 10;

/// The tenant flags of `ursula gateway`.
#[derive(Debug, Clone, Default, Args)]
pub struct TenantArgs {
    /// Per-bucket limits: a TOML file of `[default]` and `[[bucket]]` sections.
    #[arg(long, value_name = "FILE")]
    pub quota_policy: Option<PathBuf>,
    /// Append usage batches (JSON lines) to this file.
    #[arg(long, value_name = "FILE")]
    pub usage_log: Option<PathBuf>,
    /// Seconds between usage batches.
    #[arg(long, value_name = "SECS")]
    pub usage_flush_secs: Option<u64>,
    /// Count each append as ceil(bytes / N) write units, at least one, in `chunks`.
    #[arg(long, value_name = "N")]
    pub usage_chunk_bytes: Option<u64>,
}

/// Why the tenant flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TenantConfigError {
    #[error(transparent)]
    Quota(#[from] QuotaPolicyError),
    #[error("{0} requires --usage-log")]
    NeedsUsageLog(&'static str),
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

/// The tenant flags, checked.
#[derive(Debug, Clone, Default)]
pub struct TenantConfig {
    pub quotas: Option<QuotaPolicy>,
    pub usage: Option<UsageConfig>,
}

impl TenantConfig {
    pub fn from_args(args: &TenantArgs) -> Result<TenantConfig, TenantConfigError> {
        let quotas = args
            .quota_policy
            .as_deref()
            .map(QuotaPolicy::load)
            .transpose()?;
        let usage = match &args.usage_log {
            None => {
                if args.usage_flush_secs.is_some() {
                    return Err(TenantConfigError::NeedsUsageLog("--usage-flush-secs"));
                }
                if args.usage_chunk_bytes.is_some() {
                    return Err(TenantConfigError::NeedsUsageLog("--usage-chunk-bytes"));
                }
                None
            }
            Some(path) => {
                let secs = args.usage_flush_secs.unwrap_or(DEFAULT_USAGE_FLUSH_SECS);
                if secs == 0 {
                    return Err(TenantConfigError::Zero("--usage-flush-secs"));
                }
                let chunk_bytes = match args.usage_chunk_bytes {
                    None => None,
                    Some(n) => Some(
                        NonZeroU64::new(n).ok_or(TenantConfigError::Zero("--usage-chunk-bytes"))?,
                    ),
                };
                Some(UsageConfig {
                    path: path.clone(),
                    flush_every: Duration::from_secs(secs),
                    chunk_bytes,
                })
            }
        };
        Ok(TenantConfig { quotas, usage })
    }
}

/// The tenant side of a gateway: limits and the usage ledger, each optional.
#[derive(Debug)]
pub struct Tenants {
    pub admission: Option<Admission>,
    pub usage: Option<Arc<Usage>>,
}

/// What one admitted request carries to the end of its response.
#[derive(Debug, Default)]
pub struct Ticket {
    bucket: Option<String>,
    key: Option<UsageKey>,
    pass: Option<Pass>,
    /// Armed by [`Ticket::sending`].
    record: Option<Record>,
}

impl Tenants {
    /// `small_body_max`: bodies of at most this size never count as uploads.
    pub fn new(config: TenantConfig, small_body_max: u64) -> Tenants {
        Tenants {
            admission: config.quotas.map(|q| Admission::new(q, small_body_max)),
            usage: config.usage.map(|u| Arc::new(Usage::new(u))),
        }
    }

    /// The `tenants` section of the gateway's metrics; `None` with neither flag.
    pub fn metrics(&self) -> Option<serde_json::Value> {
        if self.admission.is_none() && self.usage.is_none() {
            return None;
        }
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let mut m = serde_json::Map::new();
        if let Some(a) = &self.admission {
            let c = &a.counters;
            m.insert("quota_buckets".into(), a.policy().len().into());
            m.insert("rate_limited".into(), load(&c.rate_limited).into());
            m.insert("live_reads".into(), a.live_reads().into());
            m.insert(
                "live_reads_refused".into(),
                load(&c.live_reads_refused).into(),
            );
            m.insert("body_too_large".into(), load(&c.body_too_large).into());
            // The upload limits' refusals and `upload_tenants` are top-level, beside the
            // budget's (the names of the spec's upload metrics).
        }
        if let Some(u) = &self.usage {
            m.insert(
                "usage_batches_written".into(),
                load(&u.stats.batches_written).into(),
            );
            m.insert(
                "usage_sink_failures".into(),
                load(&u.stats.sink_failures).into(),
            );
        }
        Some(serde_json::Value::Object(m))
    }

    /// Admits a request from its head, after access control. A request under no bucket
    /// passes untouched. `addr`: the client's address, whose own share of the bucket's limits
    /// an anonymous caller admitted by access control takes. `Err`: the refusal to send.
    pub fn admit(
        &self,
        parts: &Parts,
        admitted: Option<&Admitted>,
        addr: Option<IpAddr>,
    ) -> Result<Ticket, AdmissionRejection> {
        if self.admission.is_none() && self.usage.is_none() {
            return Ok(Ticket::default());
        }
        let bucket = match admitted {
            Some(a) => Some(a.bucket.clone()),
            None => auth::bucket_of(parts.uri.path()),
        };
        let Some(bucket) = bucket else {
            return Ok(Ticket::default());
        };
        let pass = match &self.admission {
            None => None,
            Some(adm) => {
                let declared = declared_length(parts);
                // Without access control every caller is anonymous and the network trusted:
                // the bucket's share is one.
                let anonymous_from = admitted.filter(|a| a.principal.is_none()).and(addr);
                match adm.admit(&bucket, is_live(parts), declared, anonymous_from) {
                    Ok(p) => Some(p),
                    Err(r) => return Err(r),
                }
            }
        };
        let key = self.usage.as_ref().map(|_| UsageKey {
            bucket: bucket.clone(),
            principal: admitted.and_then(|a| a.principal.clone()),
            class: ActionClass::of(&parts.method),
        });
        Ok(Ticket {
            bucket: Some(bucket),
            key,
            pass,
            record: None,
        })
    }
}

impl Ticket {
    /// Counts a body of `bytes` against the bucket's upload limits while it is read.
    pub fn admit_upload(
        &self,
        tenants: &Tenants,
        bytes: Option<u64>,
    ) -> Result<Option<UploadGuard>, AdmissionRejection> {
        let (Some(adm), Some(bucket), Some(n)) = (&tenants.admission, &self.bucket, bytes) else {
            return Ok(None);
        };
        adm.admit_upload(bucket, n)
    }

    /// Arms the count of this request, about to be forwarded with an `ingress`-byte body: it
    /// is counted when the ticket ends, also when the client goes mid-forward (the request may
    /// have been applied), unless [`Ticket::not_sent`] says nothing went out.
    pub fn sending(mut self, tenants: &Tenants, ingress: u64) -> Ticket {
        if let (Some(u), Some(k)) = (&tenants.usage, self.key.take()) {
            self.record = Some(Record {
                usage: u.clone(),
                key: k,
                ingress,
            });
        }
        self
    }

    /// Nothing of the request reached a node (the first upstream refused the connection): the
    /// gateway's own refusal is not counted.
    pub fn not_sent(&mut self) {
        self.record = None;
    }

    /// Counts the forwarded request, and wraps the response so its body counts as egress while
    /// it streams and a live read keeps its share until it ends.
    pub fn forwarded(mut self, resp: Response<GatewayBody>) -> Response<GatewayBody> {
        let meter = self.record.take().map(|r| {
            r.usage.record_request(&r.key, r.ingress);
            (r.usage.clone(), r.key.clone())
        });
        let live = self.pass.take().and_then(|p| p.live);
        let (parts, body) = resp.into_parts();
        Response::from_parts(parts, Metered::wrap(body, meter, live))
    }
}

/// A request's usage, counted once: by [`Ticket::forwarded`], or when dropped mid-forward.
#[derive(Debug)]
struct Record {
    usage: Arc<Usage>,
    key: UsageKey,
    ingress: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(r) = self.record.take() {
            r.usage.record_request(&r.key, r.ingress);
        }
    }
}

/// The answer to a refused admission.
pub fn refusal(r: AdmissionRejection) -> Response<GatewayBody> {
    let text = r.to_string();
    match r {
        AdmissionRejection::RateLimited { retry_after } => {
            let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            reply::too_many_requests(&text, secs, None)
        }
        AdmissionRejection::LiveReadsExhausted => reply::too_many_requests(&text, 1, None),
        AdmissionRejection::UploadsExhausted => {
            reply::too_many_requests(&text, 1, Some(GatewayRefusal::TenantUploads))
        }
        AdmissionRejection::UploadBytesExhausted => {
            reply::too_many_requests(&text, 1, Some(GatewayRefusal::TenantUploadBytes))
        }
        AdmissionRejection::BodyTooLarge { .. } => {
            reply::refusal(GatewayRefusal::RequestBodyTooLarge, Mark::Marked, &text)
        }
    }
}

fn declared_length(parts: &Parts) -> Option<u64> {
    parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// A live read: `live=long-poll` or `live=sse`, the reads that hold a connection open.
fn is_live(parts: &Parts) -> bool {
    parts.uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "live=long-poll" | "live=sse"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, uri: &str) -> Parts {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .expect("request")
            .into_parts()
            .0
    }

    #[test]
    fn live_reads_are_the_long_poll_and_sse_ones() {
        assert!(is_live(&parts("GET", "/b/s?offset=-1&live=sse")));
        assert!(is_live(&parts("GET", "/b/s?live=long-poll&offset=5")));
        assert!(!is_live(&parts("GET", "/b/s?offset=-1")));
        assert!(!is_live(&parts("GET", "/b/s?alive=sse")));
    }

    #[test]
    fn without_access_control_the_bucket_is_the_paths_first_segment() {
        let t = Tenants::new(
            TenantConfig {
                quotas: Some(
                    QuotaPolicy::parse("[[bucket]]\nid = \"tenant-b\"\nmax_live_reads = 1")
                        .expect("p"),
                ),
                usage: None,
            },
            1 << 20,
        );
        let held = t
            .admit(&parts("GET", "/tenant-b/stream-1?live=sse"), None, None)
            .expect("first");
        let refused = refusal(
            t.admit(
                &parts("GET", "/tenant-b/stream-2?live=long-poll"),
                None,
                None,
            )
            .expect_err("second live read of tenant-b"),
        );
        assert_eq!(refused.status(), http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[http::header::RETRY_AFTER], "1");
        // Another bucket, and paths under no bucket, are not limited.
        assert!(
            t.admit(&parts("GET", "/tenant-c/stream-1?live=sse"), None, None)
                .is_ok()
        );
        assert!(
            t.admit(&parts("GET", "/__ursula/metrics"), None, None)
                .is_ok()
        );
        drop(held);
        assert!(
            t.admit(&parts("GET", "/tenant-b/stream-1?live=sse"), None, None)
                .is_ok()
        );
    }

    #[test]
    fn flags_that_need_a_usage_log_or_a_positive_value_are_refused() {
        let bad = [
            TenantArgs {
                usage_flush_secs: Some(5),
                ..TenantArgs::default()
            },
            TenantArgs {
                usage_chunk_bytes: Some(10),
                ..TenantArgs::default()
            },
            TenantArgs {
                usage_log: Some("/tmp/u.jsonl".into()),
                usage_flush_secs: Some(0),
                ..TenantArgs::default()
            },
            TenantArgs {
                usage_log: Some("/tmp/u.jsonl".into()),
                usage_chunk_bytes: Some(0),
                ..TenantArgs::default()
            },
            TenantArgs {
                quota_policy: Some("/nonexistent/quotas.toml".into()),
                ..TenantArgs::default()
            },
        ];
        for args in bad {
            assert!(TenantConfig::from_args(&args).is_err(), "accepted {args:?}");
        }
        let ok = TenantConfig::from_args(&TenantArgs {
            usage_log: Some("/tmp/u.jsonl".into()),
            ..TenantArgs::default()
        })
        .expect("ok");
        assert_eq!(
            ok.usage.expect("usage").flush_every,
            Duration::from_secs(DEFAULT_USAGE_FLUSH_SECS)
        );
    }
}
