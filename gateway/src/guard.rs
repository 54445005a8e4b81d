//! The access-control step of a request, between its arrival and its forwarding: what
//! [`Auth`] decides, turned into the gateway's answer or a go-ahead. Only used while
//! `--auth-issuer` is set.

use std::sync::atomic::AtomicU64;

use http::request::Parts;

use crate::auth::Admitted;
use crate::auth::Ask;
use crate::auth::Auth;
use crate::auth::Decision;
use crate::reply;
use crate::reply::GatewayBody;
use crate::reply::GatewayRefusal;
use crate::reply::METRICS_PATH;
use crate::reply::Mark;
use crate::upstreams::Counters;

/// Access-control counters, shown on the gateway's metrics.
#[derive(Debug, Default)]
pub struct AuthCounters {
    pub admitted: AtomicU64,
    pub concealed: AtomicU64,
    pub invalid_token: AtomicU64,
    pub unavailable: AtomicU64,
}

/// What happens next to a request.
pub enum Gate {
    /// Serve the gateway's own metrics.
    Metrics,
    /// Forward it, for whom the decision says.
    Forward(Admitted),
    /// Answer the concealment `404`, once the body was read by the usual rules, so that the
    /// answer matches a missing stream's in every respect (a too-large body gets its `413`
    /// either way).
    Conceal,
    /// Answer this, without reading the body.
    Answer(hyper::Response<GatewayBody>),
}

/// Judges one request. `/__ursula/*` is concealed whole, except the gateway's metrics under
/// `--auth-public-metrics`, which then need no token at all (a bad one included).
pub async fn admit(auth: &Auth, counters: &AuthCounters, parts: &Parts) -> Gate {
    let path = parts.uri.path();
    if path == METRICS_PATH && auth.config().public_metrics {
        return Gate::Metrics;
    }
    if path == "/__ursula" || path.starts_with("/__ursula/") {
        Counters::bump(&counters.concealed);
        return Gate::Conceal;
    }
    let ask = Ask {
        method: &parts.method,
        path,
        headers: &parts.headers,
    };
    match auth.decide(&ask).await {
        Decision::Forward(a) => {
            Counters::bump(&counters.admitted);
            Gate::Forward(a)
        }
        Decision::Conceal => {
            Counters::bump(&counters.concealed);
            Gate::Conceal
        }
        Decision::InvalidToken(e) => {
            Counters::bump(&counters.invalid_token);
            tracing::debug!(error = %e, method = %parts.method, "refused a token");
            Gate::Answer(reply::invalid_token(&e.to_string()))
        }
        Decision::Unavailable(why) => {
            Counters::bump(&counters.unavailable);
            tracing::warn!(error = %why, "cannot verify a token");
            Gate::Answer(reply::refusal(
                GatewayRefusal::AuthenticationUnavailable,
                Mark::Marked,
                &format!("cannot verify the token: {why}"),
            ))
        }
    }
}
