//! The flags of `ursula gateway` ([`GatewayArgs`]) and the checked [`GatewayConfig`] built from
//! them, with the upstream URLs in the form redirects are matched against.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use http::Uri;

use crate::GatewayError;
use crate::auth::AuthArgs;
use crate::auth::AuthConfig;
use crate::cors::Cors;
use crate::cors::CorsArgs;
use crate::tenant::TenantArgs;
use crate::tenant::TenantConfig;
use crate::timeouts::DEFAULT_LISTEN;
use crate::timeouts::TimeoutArgs;
use crate::uploads::UploadArgs;
use crate::uploads::UploadLimits;
use crate::uploads::UploadLimitsSpec;

/// `ursula gateway` flags.
#[derive(Debug, Clone, Args)]
pub struct GatewayArgs {
    /// A node to forward to, by the URL its peers know it by (its `[[raft.peers]]` url), so
    /// that leader redirects match. Repeat the flag for every voter.
    #[arg(long = "upstream", value_name = "URL", required = true)]
    pub upstreams: Vec<String>,
    /// Address the gateway listens on: every interface on the nodes' client port by default.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    #[command(flatten)]
    pub uploads: UploadArgs,
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
    #[command(flatten)]
    pub tenants: TenantArgs,
    #[command(flatten)]
    pub cors: CorsArgs,
}

/// Everything a running gateway needs, checked.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// In configured order: the order the redirect rule walks them in.
    pub upstreams: Vec<UpstreamUrl>,
    pub listen: SocketAddr,
    /// The body limit, the shared body budget and how fast a body must arrive.
    pub uploads: UploadLimits,
    /// How long a connect to an upstream may take before it counts as failed (5 s).
    pub connect_timeout: Duration,
    /// Linux `TCP_USER_TIMEOUT` on upstream connections, also the keepalive base (5 s).
    pub upstream_tcp_user_timeout: Duration,
    /// No response headers from an upstream within this: `504` (75 s).
    pub response_header_timeout: Duration,
    /// A client connection without a whole request head within this is closed (120 s).
    pub request_head_timeout: Duration,
    /// Client connections served at once (16384).
    pub max_connections: usize,
    /// Hops after the first redirect (3).
    pub max_redirect_hops: usize,
    /// No hop starts later than this after the first redirect (5 s).
    pub redirect_window: Duration,
    /// Access control, `None` without `--auth-issuer`: a trusted pass-through then.
    pub auth: Option<AuthConfig>,
    /// Quotas and usage accounting (`--quota-policy`, `--usage-*`), each optional.
    pub tenants: TenantConfig,
    /// Allowed browser origins, `None` without `--cors-allowed-origin`: no CORS header then.
    pub cors: Option<Cors>,
}

impl GatewayConfig {
    /// Checks the flags: at least one `http://host:port` upstream and a socket address.
    pub fn from_args(args: &GatewayArgs) -> Result<GatewayConfig, GatewayError> {
        if args.upstreams.is_empty() {
            return Err(GatewayError::NoUpstream);
        }
        let upstreams = args
            .upstreams
            .iter()
            .map(|u| UpstreamUrl::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, u) in upstreams.iter().enumerate() {
            if upstreams[..i].iter().any(|o| o.same_node(u)) {
                return Err(GatewayError::DuplicateUpstream(u.base.clone()));
            }
        }
        let listen = args
            .listen
            .parse::<SocketAddr>()
            .map_err(|_| GatewayError::BadListen(args.listen.clone()))?;
        let uploads = UploadLimits::try_from(UploadLimitsSpec::from(&args.uploads))?;
        let t = &args.timeouts;
        t.check()?;
        Ok(GatewayConfig {
            upstreams,
            listen,
            uploads,
            connect_timeout: t.connect_timeout,
            upstream_tcp_user_timeout: t.upstream_tcp_user_timeout,
            response_header_timeout: t.response_header_timeout,
            request_head_timeout: t.request_head_timeout,
            max_connections: t.max_connections,
            max_redirect_hops: 3,
            redirect_window: Duration::from_secs(5),
            auth: AuthConfig::from_args(&args.auth)?,
            tenants: TenantConfig::from_args(&args.tenants)?,
            cors: Cors::from_args(&args.cors)?,
        })
    }
}

/// An upstream's base URL: `http://host:port`, with nothing after the authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    /// `http://host:port` without a trailing slash; request targets are appended to it.
    pub base: String,
    /// Lowercase host, for matching redirect targets.
    host: String,
    port: u16,
}

impl UpstreamUrl {
    pub fn parse(raw: &str) -> Result<UpstreamUrl, GatewayError> {
        let bad = |why: &'static str| GatewayError::BadUpstream {
            url: raw.to_owned(),
            why,
        };
        let uri: Uri = raw.trim().parse().map_err(|_| bad("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(bad("https upstreams are not supported by this build")),
            _ => return Err(bad("the scheme must be http://")),
        }
        let (host, port) = host_port(&uri).ok_or_else(|| bad("the URL names no host"))?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(bad("an upstream URL has no path or query"));
        }
        let base = match uri.authority() {
            Some(a) => format!("http://{a}"),
            None => return Err(bad("the URL names no host")),
        };
        Ok(UpstreamUrl { base, host, port })
    }

    /// Whether `other` names the same host and port (default port 80 filled in).
    pub fn same_node(&self, other: &UpstreamUrl) -> bool {
        self.host == other.host && self.port == other.port
    }

    /// Whether an absolute URL (a redirect's `Location`) points at this upstream.
    pub fn names(&self, uri: &Uri) -> bool {
        uri.scheme_str() == Some("http")
            && host_port(uri).is_some_and(|(h, p)| h == self.host && p == self.port)
    }
}

/// Lowercase host and port (80 when absent) of an absolute `http` URL.
fn host_port(uri: &Uri) -> Option<(String, u16)> {
    let host = uri.host()?.to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    Some((host, uri.port_u16().unwrap_or(80)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(upstreams: &[&str], listen: &str) -> GatewayArgs {
        GatewayArgs {
            upstreams: upstreams.iter().map(|s| (*s).to_owned()).collect(),
            listen: listen.to_owned(),
            uploads: UploadArgs::default(),
            timeouts: TimeoutArgs::default(),
            auth: AuthArgs::default(),
            tenants: TenantArgs::default(),
            cors: CorsArgs::default(),
        }
    }

    #[test]
    fn upstreams_are_plain_http_bases() {
        let u = UpstreamUrl::parse("http://127.0.0.1:4437/").expect("valid");
        assert_eq!(u.base, "http://127.0.0.1:4437");
        assert!(UpstreamUrl::parse("https://a:1").is_err());
        assert!(UpstreamUrl::parse("http://a:1/prefix").is_err());
        assert!(UpstreamUrl::parse("a:1").is_err());
        assert!(UpstreamUrl::parse("http://a:1/?x=1").is_err());
    }

    #[test]
    fn a_redirect_target_matches_by_host_and_port() {
        let u = UpstreamUrl::parse("http://Node-1:80").expect("valid");
        let hit: Uri = "http://node-1/demo/s?offset=-1".parse().expect("uri");
        let other_port: Uri = "http://node-1:81/demo/s".parse().expect("uri");
        assert!(u.names(&hit));
        assert!(!u.names(&other_port));
        assert!(!u.names(&"/demo/s".parse().expect("uri")));
    }

    #[test]
    fn flags_are_checked() {
        assert!(GatewayConfig::from_args(&args(&["http://127.0.0.1:1"], "127.0.0.1:0")).is_ok());
        assert!(matches!(
            GatewayConfig::from_args(&args(&[], "127.0.0.1:0")),
            Err(GatewayError::NoUpstream)
        ));
        assert!(matches!(
            GatewayConfig::from_args(&args(&["http://a:1", "http://A:1/"], "127.0.0.1:0")),
            Err(GatewayError::DuplicateUpstream(_))
        ));
        assert!(matches!(
            GatewayConfig::from_args(&args(&["http://a:1"], "nowhere")),
            Err(GatewayError::BadListen(_))
        ));
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        gateway: GatewayArgs,
    }

    #[test]
    fn the_flag_defaults_are_the_documented_ones() {
        use clap::Parser;
        let cli = Cli::try_parse_from(["ursulagw", "--upstream", "http://a:1"]).expect("parse");
        let a = cli.gateway;
        assert_eq!(a.listen, DEFAULT_LISTEN);
        assert_eq!(
            format!("{:?}", a.uploads),
            format!("{:?}", UploadArgs::default())
        );
        assert_eq!(
            format!("{:?}", a.timeouts),
            format!("{:?}", TimeoutArgs::default())
        );
        let c = GatewayConfig::from_args(&a).expect("config");
        assert_eq!(c.listen, "0.0.0.0:4437".parse().expect("addr"));
        assert_eq!(c.response_header_timeout, Duration::from_secs(75));
        assert_eq!(c.request_head_timeout, Duration::from_secs(120));
        assert_eq!(c.max_connections, 16_384);
        assert_eq!(c.uploads.budget_bytes(), 256 * 1024 * 1024);
        let low = Cli::try_parse_from([
            "ursulagw",
            "--upstream",
            "http://a:1",
            "--body-budget-bytes",
            "1000",
        ])
        .expect("parse");
        assert!(matches!(
            GatewayConfig::from_args(&low.gateway),
            Err(GatewayError::Uploads(
                crate::uploads::UploadLimitsError::LimitAboveSharedBudget { .. }
            ))
        ));
        let short = Cli::try_parse_from([
            "ursulagw",
            "--upstream",
            "http://a:1",
            "--upstream-tcp-user-timeout",
            "500ms",
        ])
        .expect("parse");
        assert!(matches!(
            GatewayConfig::from_args(&short.gateway),
            Err(GatewayError::Timeouts(_))
        ));
    }
}
