//! The gateway's own answers and header hygiene: refusal tokens, JSON refusal bodies, the
//! vouch, and the hop-by-hop headers that never cross the gateway.

use bytes::Bytes;
use http::HeaderMap;
use http::HeaderValue;
use http::Response;
use http::StatusCode;
use http::header;
use http_body_util::BodyExt;
use http_body_util::Full;
use http_body_util::combinators::UnsyncBoxBody;
use ursula_protocol::headers as h;

/// The gateway's own metrics path.
pub const METRICS_PATH: &str = "/__ursula/gateway/metrics";

/// Errors a response body can end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response body the gateway returns: its own, or an upstream's streamed through.
pub type GatewayBody = UnsyncBoxBody<Bytes, BoxError>;

/// `x-ursula-not-applied` tokens the gateway itself sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayRefusal {
    /// `413`: the body is over `--max-request-body-bytes`; nothing was forwarded.
    RequestBodyTooLarge,
    /// `400`: the body could not be read; nothing was forwarded.
    RequestBodyUnreadable,
    /// `408`: the body stopped arriving, or arrived too slowly; nothing was forwarded.
    RequestBodyTooSlow,
    /// `503`: the shared body budget stayed spent for `--body-budget-wait-ms`; nothing was
    /// forwarded.
    UploadBudgetExhausted,
    /// `503`: the connection to the upstream failed, so the request was not sent there.
    UpstreamUnreachable,
    /// `503`: no upstream answered without redirecting within the redirect limits.
    LeaderNotFound,
    /// `503`: access control could not verify the token, e.g. its issuer is unreachable.
    AuthenticationUnavailable,
    /// `503`: access control could not reach a decision. The built-in file policy always
    /// decides, so this build never sends it; it is named for the refusal table.
    AuthorizationUnavailable,
    /// `404`: the access policy does not serve the resource to these credentials. Sent on the
    /// concealment `404`, and on every upstream `404` while access control is on, so the two
    /// cannot be told apart.
    NotFound,
    /// `429`: the bucket's large bodies under way reached its `max_concurrent_uploads`.
    TenantUploads,
    /// `429`: the bucket's large bodies under way reached its `max_upload_bytes`.
    TenantUploadBytes,
}

impl GatewayRefusal {
    pub fn token(self) -> &'static str {
        match self {
            GatewayRefusal::RequestBodyTooLarge => "RequestBodyTooLarge",
            GatewayRefusal::RequestBodyUnreadable => "RequestBodyUnreadable",
            GatewayRefusal::RequestBodyTooSlow => "RequestBodyTooSlow",
            GatewayRefusal::UploadBudgetExhausted => "UploadBudgetExhausted",
            GatewayRefusal::UpstreamUnreachable => "UpstreamUnreachable",
            GatewayRefusal::LeaderNotFound => "LeaderNotFound",
            GatewayRefusal::AuthenticationUnavailable => "AuthenticationUnavailable",
            GatewayRefusal::AuthorizationUnavailable => "AuthorizationUnavailable",
            GatewayRefusal::NotFound => "NotFound",
            GatewayRefusal::TenantUploads => "TenantUploads",
            GatewayRefusal::TenantUploadBytes => "TenantUploadBytes",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            GatewayRefusal::RequestBodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayRefusal::RequestBodyUnreadable => StatusCode::BAD_REQUEST,
            GatewayRefusal::RequestBodyTooSlow => StatusCode::REQUEST_TIMEOUT,
            GatewayRefusal::UpstreamUnreachable
            | GatewayRefusal::UploadBudgetExhausted
            | GatewayRefusal::LeaderNotFound
            | GatewayRefusal::AuthenticationUnavailable
            | GatewayRefusal::AuthorizationUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            GatewayRefusal::NotFound => StatusCode::NOT_FOUND,
            GatewayRefusal::TenantUploads | GatewayRefusal::TenantUploadBytes => {
                StatusCode::TOO_MANY_REQUESTS
            }
        }
    }
}

/// Whether a refusal carries the marker: the gateway's pre-forward refusals always do; its
/// `503`s after redirects only when every redirect on the way was marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Marked,
    Unmarked,
}

pub fn body(bytes: impl Into<Bytes>) -> GatewayBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A gateway refusal: its status, a JSON body naming the cause, `Retry-After: 1` on `503`s,
/// and the marker when `mark` says so. The vouch is added on the way out like everywhere.
pub fn refusal(kind: GatewayRefusal, mark: Mark, message: &str) -> Response<GatewayBody> {
    let status = kind.status();
    let mut resp = json_error(status, kind.token(), message);
    let headers = resp.headers_mut();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if mark == Mark::Marked {
        headers.insert(h::NOT_APPLIED, HeaderValue::from_static(kind.token()));
    }
    resp
}

/// A tenant's `429`: `Retry-After` in whole seconds (at least 1), and the reason as the whole
/// plain-text body, since clients show the body as the refusal's reason (the SQLite
/// extension's `refused_reason`). Marked only for the upload limits, whose tokens the
/// refusal table lists; a rate refusal is a `429`, which says "not applied" by itself.
pub fn too_many_requests(
    reason: &str,
    retry_after_secs: u64,
    mark: Option<GatewayRefusal>,
) -> Response<GatewayBody> {
    let mut resp = uncached(StatusCode::TOO_MANY_REQUESTS, reason.to_owned(), TEXT);
    let hs = resp.headers_mut();
    hs.insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after_secs.max(1)),
    );
    if let Some(kind) = mark {
        hs.insert(h::NOT_APPLIED, HeaderValue::from_static(kind.token()));
    }
    resp
}

/// A `404` for a path the gateway does not serve or forward.
pub fn not_found(message: &str) -> Response<GatewayBody> {
    json_error(StatusCode::NOT_FOUND, "NotFound", message)
}

/// The body of a node's `404` for a stream that does not exist.
pub const MISSING_STREAM_BODY: &str = "stream not found";

/// Access control's `404`: byte for byte the answer a node gives, through the gateway, for a
/// stream that does not exist (its headers in the node's order, its `Date`, its text body;
/// the node's CORS headers left out, as [`crate::cors`] drops them from every answer),
/// marked [`GatewayRefusal::NotFound`] as every `404` is while access control is on. A test
/// compares the two, so a change to the node's answer that this copy misses fails it.
pub fn concealed_not_found() -> Response<GatewayBody> {
    let mut resp = uncached(StatusCode::NOT_FOUND, MISSING_STREAM_BODY.to_owned(), TEXT);
    let hs = resp.headers_mut();
    hs.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    hs.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
    hs.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(MISSING_STREAM_BODY.len()),
    );
    if let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now()))
    {
        hs.insert(header::DATE, date);
    }
    mark_not_found(hs);
    resp
}

/// Marks a `404` [`GatewayRefusal::NotFound`] unless it carries a marker already.
pub fn mark_not_found(headers: &mut HeaderMap) {
    if !headers.contains_key(h::NOT_APPLIED) {
        headers.insert(
            h::NOT_APPLIED,
            HeaderValue::from_static(GatewayRefusal::NotFound.token()),
        );
    }
}

/// `401` for a credential that is not a valid access token (RFC 6750 §3.1). It names no
/// resource and is the same for every path, so it tells nothing about what exists.
pub fn invalid_token(why: &str) -> Response<GatewayBody> {
    let mut resp = json_error(StatusCode::UNAUTHORIZED, "InvalidToken", why);
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer error=\"invalid_token\""),
    );
    resp
}

/// An unmarked `502`: the request was sent and the exchange then failed, so it may have applied.
pub fn bad_gateway(message: &str) -> Response<GatewayBody> {
    json_error(StatusCode::BAD_GATEWAY, "UpstreamFailed", message)
}

/// An unmarked `504`: the request went out and no response headers came back within
/// `--response-header-timeout`, so it may have been applied.
pub fn gateway_timeout(message: &str) -> Response<GatewayBody> {
    json_error(StatusCode::GATEWAY_TIMEOUT, "UpstreamTimeout", message)
}

/// The gateway's own answers: `{"error", "message"}` as JSON, never cached.
fn json_error(status: StatusCode, error: &str, message: &str) -> Response<GatewayBody> {
    let text = serde_json::json!({ "error": error, "message": message }).to_string();
    uncached(status, text, "application/json")
}

/// The plain-text type of the gateway's and the nodes' text answers.
const TEXT: &str = "text/plain; charset=utf-8";

/// An answer of the gateway's own, never cached: `Content-Type` first, then `Cache-Control`,
/// as a node orders them (the concealing `404` copies a node's answer byte for byte).
fn uncached(status: StatusCode, text: String, content_type: &'static str) -> Response<GatewayBody> {
    let mut resp = Response::new(body(text));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Sets the vouch, after dropping any copy an upstream sent.
pub fn vouch(headers: &mut HeaderMap) {
    headers.remove(h::NOT_APPLIED_CHECKED);
    headers.insert(h::NOT_APPLIED_CHECKED, HeaderValue::from_static("1"));
}

/// The `Content-Security-Policy` of every answer: a document a browser renders from it runs
/// sandboxed (no scripts, forms, plugins or same-origin access: a unique opaque origin) and
/// may load nothing.
pub const SANDBOX_CSP: &str = "sandbox; default-src 'none'";

/// Keeps a stream's bytes from acting as a page of the gateway's origin: `nosniff`, so a
/// browser takes the stream's declared type and never guesses an active one, and
/// [`SANDBOX_CSP`], so that a `text/html` or `image/svg+xml` stream opened in a browser cannot
/// run script with the gateway's origin. Set on every answer, not on a list of active types:
/// such a list misses some (XSLT, PDF, `multipart/x-mixed-replace`, parameter and case
/// variants, types a browser sniffs), and a CSP governs only documents a browser renders, so
/// API clients, `fetch` and `EventSource` readers are unaffected. An upstream's copy is
/// replaced.
pub fn harden(headers: &mut HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(SANDBOX_CSP),
    );
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded in either direction.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// An error and its sources, on one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_status_token_and_retry_after() {
        let r = refusal(GatewayRefusal::LeaderNotFound, Mark::Marked, "none");
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            r.headers()
                .get(h::NOT_APPLIED)
                .and_then(|v| v.to_str().ok()),
            Some("LeaderNotFound")
        );
        assert_eq!(
            r.headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()),
            Some("1")
        );
        let r = refusal(GatewayRefusal::LeaderNotFound, Mark::Unmarked, "none");
        assert!(r.headers().get(h::NOT_APPLIED).is_none());
        let r = refusal(GatewayRefusal::RequestBodyTooLarge, Mark::Marked, "big");
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }

    #[test]
    fn hop_by_hop_headers_and_the_ones_connection_names_are_dropped() {
        let mut hs = HeaderMap::new();
        hs.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-private"),
        );
        hs.insert("x-private", HeaderValue::from_static("1"));
        hs.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        hs.insert("stream-next-offset", HeaderValue::from_static("0"));
        strip_hop_by_hop(&mut hs);
        assert_eq!(hs.len(), 1);
        assert!(hs.contains_key("stream-next-offset"));
    }

    #[test]
    fn hardening_sets_nosniff_and_the_sandbox_over_an_upstream_copy() {
        let mut hs = HeaderMap::new();
        hs.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("script-src *"),
        );
        harden(&mut hs);
        assert_eq!(hs[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(
            hs.get_all(header::CONTENT_SECURITY_POLICY).iter().count(),
            1
        );
        assert_eq!(hs[header::CONTENT_SECURITY_POLICY], SANDBOX_CSP);
    }

    #[test]
    fn the_vouch_replaces_an_upstream_copy() {
        let mut hs = HeaderMap::new();
        hs.append(h::NOT_APPLIED_CHECKED, HeaderValue::from_static("0"));
        hs.append(h::NOT_APPLIED_CHECKED, HeaderValue::from_static("yes"));
        vouch(&mut hs);
        let all: Vec<_> = hs.get_all(h::NOT_APPLIED_CHECKED).iter().collect();
        assert_eq!(all, vec![HeaderValue::from_static("1")]);
    }
}
