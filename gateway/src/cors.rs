//! Opt-in CORS (`--cors-allowed-origin`): which browser origins may read through the gateway,
//! the one preflight answer the gateway gives for every path, and the headers every other
//! answer gets.
//!
//! - Off (no flag): no CORS header leaves the gateway. The nodes send their own permissive
//!   ones (`Access-Control-Allow-Origin: *` and friends); those are dropped from every answer
//!   with or without the flag, since allowed origins are the gateway's policy, not a node's.
//! - On: a preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered here, before
//!   access control and without reading the resource, so it is the same for every path and
//!   tells an unauthenticated caller nothing about what exists. Every other answer (forwarded
//!   or the gateway's own, the concealment `404` included) gets `Access-Control-Allow-Origin`
//!   and `Access-Control-Expose-Headers: *` when the request's `Origin` is allowed.
//! - Credentials are never allowed: no `Access-Control-Allow-Credentials`, ever. The bearer
//!   token is a header the page sets itself, which CORS does not count as a credential, and it
//!   is what lets the wildcards (`*` origin, `*` exposure) stay meaningful.

use clap::Args;
use http::HeaderMap;
use http::HeaderValue;
use http::Method;
use http::Response;
use http::StatusCode;
use http::header;

use crate::reply;
use crate::reply::GatewayBody;

/// The methods the protocol's routes use (streams take all five; buckets, snapshots and
/// retention a subset). A preflight is not per path, so it names them all.
pub const ALLOWED_METHODS: &str = "GET, HEAD, POST, PUT, DELETE";

/// How long a browser may reuse a preflight answer: 2 h, the most Chromium honours. A removed
/// origin stops working for preflighted requests within this; simple reads (`EventSource`,
/// plain `GET`) are checked on every answer.
pub const MAX_AGE_SECS: &str = "7200";

/// `--cors-allowed-origin` flags.
#[derive(Debug, Clone, Default, Args)]
pub struct CorsArgs {
    /// A browser origin whose pages may read through the gateway, as browsers send it:
    /// `scheme://host[:port]`, e.g. `https://app.example.com`. Repeat the flag for each
    /// origin, or give `*` alone for any origin. Without it no CORS header is sent.
    #[arg(long = "cors-allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
}

/// Why `--cors-allowed-origin` was refused at startup.
#[derive(Debug, thiserror::Error)]
pub enum CorsConfigError {
    #[error("--cors-allowed-origin {value:?}: {why}")]
    BadOrigin { value: String, why: &'static str },
    #[error(
        "--cors-allowed-origin * allows every origin; it cannot be combined with named origins"
    )]
    WildcardWithOthers,
}

/// The checked policy: which origins are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cors {
    /// `*`: every origin, answered with `Access-Control-Allow-Origin: *`.
    AnyOrigin,
    /// These serialized origins, each echoed back to itself, with `Vary: Origin`.
    Origins(Vec<String>),
}

/// What one request's `Origin` earned, decided before the request is consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowance {
    /// No CORS header for this answer (no `Origin`, or one not allowed).
    Denied,
    /// `Access-Control-Allow-Origin: *`.
    Any,
    /// `Access-Control-Allow-Origin: <the request's origin>`.
    Origin(HeaderValue),
}

impl Cors {
    /// The policy of the flags; `None` when none was given (CORS off).
    pub fn from_args(args: &CorsArgs) -> Result<Option<Cors>, CorsConfigError> {
        if args.allowed_origins.is_empty() {
            return Ok(None);
        }
        let wildcard = args.allowed_origins.iter().any(|o| o.trim() == "*");
        if wildcard {
            if args.allowed_origins.iter().all(|o| o.trim() == "*") {
                return Ok(Some(Cors::AnyOrigin));
            }
            return Err(CorsConfigError::WildcardWithOthers);
        }
        let mut origins: Vec<String> = Vec::new();
        for raw in &args.allowed_origins {
            let o = parse_origin(raw).map_err(|why| CorsConfigError::BadOrigin {
                value: raw.clone(),
                why,
            })?;
            if !origins.contains(&o) {
                origins.push(o);
            }
        }
        Ok(Some(Cors::Origins(origins)))
    }

    /// What a request with these headers gets. Browsers send one `Origin`, serialized (scheme
    /// and host in lowercase, no default port), so it is compared byte for byte.
    pub fn allowance(&self, req: &HeaderMap) -> Allowance {
        let mut all = req.get_all(header::ORIGIN).iter();
        let (Some(origin), None) = (all.next(), all.next()) else {
            return Allowance::Denied;
        };
        match self {
            Cors::AnyOrigin => Allowance::Any,
            Cors::Origins(list) => match origin.to_str() {
                Ok(o) if list.iter().any(|l| l == o) => Allowance::Origin(origin.clone()),
                _ => Allowance::Denied,
            },
        }
    }

    /// The answer to a preflight, whatever its path: `204`, and for an allowed origin the
    /// origin, the protocol's methods, the requested headers and the max age. A preflight
    /// from an origin not allowed gets the bare `204`, which the browser treats as a refusal.
    pub fn preflight(&self, req: &HeaderMap) -> Response<GatewayBody> {
        let mut resp = Response::new(reply::body(""));
        *resp.status_mut() = StatusCode::NO_CONTENT;
        let allowance = self.allowance(req);
        let hs = resp.headers_mut();
        if let Some(origin) = allow_origin(&allowance) {
            hs.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            hs.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(ALLOWED_METHODS),
            );
            if let Some(requested) = requested_headers(req) {
                hs.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, requested);
            }
            hs.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static(MAX_AGE_SECS),
            );
        }
        // The answer depends on these, whether or not this one was allowed, so a cache must
        // not serve one origin's answer to another.
        hs.insert(
            header::VARY,
            HeaderValue::from_static("Origin, Access-Control-Request-Headers"),
        );
        resp
    }

    /// Sets this policy's headers on an answer whose upstream CORS headers are already gone.
    fn decorate(&self, allowance: &Allowance, hs: &mut HeaderMap) {
        if let Some(origin) = allow_origin(allowance) {
            hs.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            hs.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("*"),
            );
        }
        if matches!(self, Cors::Origins(_)) {
            // Allowed or not, the answer depends on `Origin` whenever origins are listed.
            hs.append(header::VARY, HeaderValue::from_static("Origin"));
        }
    }
}

/// Whether a request is a CORS preflight: `OPTIONS` naming the method it asks about.
pub fn is_preflight(method: &Method, req: &HeaderMap) -> bool {
    method == Method::OPTIONS && req.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// Finishes a non-preflight answer: drops every `Access-Control-*` header an upstream sent,
/// then adds the policy's own when there is one (`None`: CORS off, nothing added).
pub fn finish(policy: Option<(&Cors, &Allowance)>, hs: &mut HeaderMap) {
    strip_upstream(hs);
    if let Some((cors, allowance)) = policy {
        cors.decorate(allowance, hs);
    }
}

/// Removes every `Access-Control-*` header, keeping the others in their order: the
/// concealment `404` must stay identical to a forwarded one, header order included, and
/// `HeaderMap::remove` moves the last header into the removed one's place.
pub fn strip_upstream(hs: &mut HeaderMap) {
    let is_cors = |n: &header::HeaderName| n.as_str().starts_with("access-control-");
    if !hs.keys().any(is_cors) {
        return;
    }
    let old = std::mem::take(hs);
    let mut current: Option<header::HeaderName> = None;
    for (name, value) in old {
        if let Some(n) = name {
            current = Some(n);
        }
        if let Some(n) = &current
            && !is_cors(n)
        {
            hs.append(n.clone(), value);
        }
    }
}

fn allow_origin(allowance: &Allowance) -> Option<HeaderValue> {
    match allowance {
        Allowance::Denied => None,
        Allowance::Any => Some(HeaderValue::from_static("*")),
        Allowance::Origin(o) => Some(o.clone()),
    }
}

/// The preflight's `Access-Control-Request-Headers`, echoed when it is a plain list of header
/// names. Echoing rather than listing the protocol's headers keeps new request headers working
/// without a gateway change; it grants a page nothing a non-browser client lacks, since the
/// gateway forwards any request header and no credentials are in play.
fn requested_headers(req: &HeaderMap) -> Option<HeaderValue> {
    let value = req.get(header::ACCESS_CONTROL_REQUEST_HEADERS)?;
    let text = value.to_str().ok()?;
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    let names_only = text
        .split(',')
        .map(str::trim)
        .all(|n| !n.is_empty() && n.chars().all(tchar));
    names_only.then(|| value.clone())
}

/// A serialized origin (`scheme://host[:port]`) in the form browsers send it: scheme and host
/// in lowercase, the scheme's default port left out.
fn parse_origin(raw: &str) -> Result<String, &'static str> {
    let raw = raw.trim();
    if raw.eq_ignore_ascii_case("null") {
        return Err("`null` is the origin of sandboxed and file: pages and is never allowed");
    }
    let (scheme, rest) = raw
        .split_once("://")
        .ok_or("not an origin: write scheme://host[:port], e.g. https://app.example.com")?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return Err("not a URL scheme");
    }
    let scheme = scheme.to_ascii_lowercase();
    if rest.contains(['/', '?', '#']) {
        return Err("an origin has no path, query or fragment (not even a trailing /)");
    }
    if rest.contains('@') {
        return Err("an origin has no user name or password");
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or("an unclosed [ in the host")?;
        if addr.is_empty()
            || !addr
                .chars()
                .all(|c| c.is_ascii_hexdigit() || ":.".contains(c))
        {
            return Err("not an IPv6 address in [ ]");
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or("only :port may follow the host")?,
            ),
        };
        (format!("[{}]", addr.to_ascii_lowercase()), port)
    } else {
        let (host, port) = match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        if !host.is_ascii() {
            return Err("write an internationalized host in its xn-- form, as browsers send it");
        }
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
        {
            return Err("not a host name or address");
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => None,
        Some(p) => {
            let n = p
                .parse::<u16>()
                .ok()
                .filter(|n| *n != 0 && p.chars().all(|c| c.is_ascii_digit()))
                .ok_or("the port is not a number from 1 to 65535")?;
            let default = match scheme.as_str() {
                "http" | "ws" => Some(80),
                "https" | "wss" => Some(443),
                _ => None,
            };
            (default != Some(n)).then_some(n)
        }
    };
    Ok(match port {
        Some(p) => format!("{scheme}://{host}:{p}"),
        None => format!("{scheme}://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(origins: &[&str]) -> Result<Option<Cors>, CorsConfigError> {
        Cors::from_args(&CorsArgs {
            allowed_origins: origins.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut hs = HeaderMap::new();
        for (k, v) in pairs {
            hs.append(*k, HeaderValue::from_static(v));
        }
        hs
    }

    fn get<'a>(hs: &'a HeaderMap, name: &str) -> Option<&'a str> {
        hs.get(name).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn origins_are_checked_and_stored_as_browsers_send_them() {
        let ok = |raw: &str| parse_origin(raw).expect(raw);
        assert_eq!(ok("https://app.example.com"), "https://app.example.com");
        assert_eq!(ok("HTTPS://App.Example.COM:443"), "https://app.example.com");
        assert_eq!(ok("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(ok("http://localhost:80"), "http://localhost");
        assert_eq!(ok("http://[::1]:3000"), "http://[::1]:3000");
        assert_eq!(ok("tauri://localhost"), "tauri://localhost");
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://app.example.com/path",
            "https://app.example.com?x=1",
            "https://user@app.example.com",
            "https://",
            "https://:8080",
            "https://app.example.com:0",
            "https://app.example.com:99999",
            "https://app.example.com:+80",
            "https://bücher.example",
            "null",
            "1http://a",
            "http://[::1",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn no_flag_is_off_and_a_wildcard_stands_alone() {
        assert_eq!(policy(&[]).expect("ok"), None);
        assert_eq!(policy(&["*"]).expect("ok"), Some(Cors::AnyOrigin));
        assert!(matches!(
            policy(&["*", "https://a.example"]),
            Err(CorsConfigError::WildcardWithOthers)
        ));
        assert!(matches!(
            policy(&["https://a.example/"]),
            Err(CorsConfigError::BadOrigin { .. })
        ));
        assert_eq!(
            policy(&[
                "https://a.example",
                "HTTPS://A.EXAMPLE",
                "http://b.example:81"
            ])
            .expect("ok"),
            Some(Cors::Origins(vec![
                "https://a.example".into(),
                "http://b.example:81".into()
            ]))
        );
    }

    #[test]
    fn only_a_single_listed_origin_is_allowed_and_echoed() {
        let cors = Cors::Origins(vec!["https://a.example".into()]);
        assert_eq!(
            cors.allowance(&headers(&[("origin", "https://a.example")])),
            Allowance::Origin(HeaderValue::from_static("https://a.example"))
        );
        for denied in [
            headers(&[]),
            headers(&[("origin", "https://b.example")]),
            headers(&[("origin", "https://a.example.evil")]),
            headers(&[("origin", "null")]),
            headers(&[
                ("origin", "https://a.example"),
                ("origin", "https://a.example"),
            ]),
        ] {
            assert_eq!(cors.allowance(&denied), Allowance::Denied, "{denied:?}");
        }
        assert_eq!(
            Cors::AnyOrigin.allowance(&headers(&[("origin", "https://b.example")])),
            Allowance::Any
        );
        assert_eq!(Cors::AnyOrigin.allowance(&headers(&[])), Allowance::Denied);
    }

    #[test]
    fn a_preflight_is_options_with_a_requested_method() {
        let asks = headers(&[("access-control-request-method", "POST")]);
        assert!(is_preflight(&Method::OPTIONS, &asks));
        assert!(!is_preflight(&Method::OPTIONS, &headers(&[])));
        assert!(!is_preflight(&Method::GET, &asks));
    }

    #[test]
    fn an_allowed_preflight_names_origin_methods_headers_and_max_age_and_never_credentials() {
        let cors = Cors::Origins(vec!["https://a.example".into()]);
        let req = headers(&[
            ("origin", "https://a.example"),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization, content-type, producer-id",
            ),
        ]);
        let resp = cors.preflight(&req);
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        let hs = resp.headers();
        assert_eq!(
            get(hs, "access-control-allow-origin"),
            Some("https://a.example")
        );
        assert_eq!(
            get(hs, "access-control-allow-methods"),
            Some(ALLOWED_METHODS)
        );
        assert_eq!(
            get(hs, "access-control-allow-headers"),
            Some("authorization, content-type, producer-id")
        );
        assert_eq!(get(hs, "access-control-max-age"), Some(MAX_AGE_SECS));
        assert!(get(hs, "vary").is_some_and(|v| v.contains("Origin")));
        assert!(!hs.contains_key("access-control-allow-credentials"));

        let any = Cors::AnyOrigin.preflight(&req);
        assert_eq!(get(any.headers(), "access-control-allow-origin"), Some("*"));
    }

    #[test]
    fn a_preflight_from_an_origin_not_allowed_gets_a_bare_204() {
        let cors = Cors::Origins(vec!["https://a.example".into()]);
        let req = headers(&[
            ("origin", "https://b.example"),
            ("access-control-request-method", "GET"),
        ]);
        let resp = cors.preflight(&req);
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        let names: Vec<&str> = resp.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["vary"]);
    }

    #[test]
    fn requested_headers_are_echoed_only_when_they_are_header_names() {
        let ask =
            |v: &'static str| requested_headers(&headers(&[("access-control-request-headers", v)]));
        assert!(ask("authorization,content-type").is_some());
        assert!(ask("authorization, x(y)").is_none());
        assert!(ask("authorization,,x").is_none());
        assert!(requested_headers(&headers(&[])).is_none());
    }

    #[test]
    fn upstream_cors_headers_are_dropped_and_the_rest_keep_their_order() {
        let mut hs = headers(&[
            ("content-type", "text/plain"),
            ("access-control-allow-origin", "*"),
            ("cache-control", "no-store"),
            ("access-control-expose-headers", "stream-next-offset"),
            ("access-control-allow-credentials", "true"),
            ("vary", "accept-encoding"),
            ("content-length", "3"),
        ]);
        finish(None, &mut hs);
        let names: Vec<&str> = hs.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            vec!["content-type", "cache-control", "vary", "content-length"]
        );
    }

    #[test]
    fn allowed_answers_get_the_origin_and_wildcard_exposure_and_denied_ones_only_vary() {
        let cors = Cors::Origins(vec!["https://a.example".into()]);
        let upstream = || {
            headers(&[
                ("access-control-allow-origin", "*"),
                ("vary", "accept-encoding"),
            ])
        };
        let mut hs = upstream();
        let allowed = Allowance::Origin(HeaderValue::from_static("https://a.example"));
        finish(Some((&cors, &allowed)), &mut hs);
        assert_eq!(
            get(&hs, "access-control-allow-origin"),
            Some("https://a.example")
        );
        assert_eq!(get(&hs, "access-control-expose-headers"), Some("*"));
        let vary: Vec<_> = hs.get_all("vary").iter().collect();
        assert_eq!(vary, vec!["accept-encoding", "Origin"]);
        assert!(!hs.contains_key("access-control-allow-credentials"));

        let mut hs = upstream();
        finish(Some((&cors, &Allowance::Denied)), &mut hs);
        assert!(
            hs.keys()
                .all(|k| !k.as_str().starts_with("access-control-"))
        );
        assert_eq!(hs.get_all("vary").iter().count(), 2);

        let mut hs = upstream();
        finish(Some((&Cors::AnyOrigin, &Allowance::Any)), &mut hs);
        assert_eq!(get(&hs, "access-control-allow-origin"), Some("*"));
        assert_eq!(hs.get_all("vary").iter().count(), 1);
    }
}
