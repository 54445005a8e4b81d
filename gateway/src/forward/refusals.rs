//! The gateway's refusals around a request body: a tenant's, the body rules' own, and the
//! drain that reads and drops a body the gateway does not forward before the answer goes out.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::HeaderValue;
use http::Response;
use http::header;
use hyper::body::Body;

use super::Inner;
use crate::admission::AdmissionRejection;
use crate::body;
use crate::body::BodyError;
use crate::body::Drained;
use crate::body::Pace;
use crate::reply;
use crate::reply::BoxError;
use crate::reply::GatewayBody;
use crate::reply::GatewayRefusal;
use crate::reply::Mark;
use crate::tenant;
use crate::upstreams::Counters;

impl Inner {
    /// A tenant's refusal, sent once the body was read and dropped: from the head at the pace
    /// of any head-decided refusal, or, for the upload limits, at the pace of a forwarded body.
    pub(super) async fn tenant_refusal<B>(
        &self,
        r: AdmissionRejection,
        incoming: Pin<&mut B>,
        declared: Option<u64>,
        untrusted: Option<IpAddr>,
    ) -> Response<GatewayBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let pace = match r {
            AdmissionRejection::UploadsExhausted => {
                Counters::bump(&self.upload_counters.refusals_tenant_uploads);
                Pace::forwarded(&self.config.uploads)
            }
            AdmissionRejection::UploadBytesExhausted => {
                Counters::bump(&self.upload_counters.refusals_tenant_bytes);
                Pace::forwarded(&self.config.uploads)
            }
            _ => Pace::HEAD_REFUSAL,
        };
        self.refuse_after_drain(incoming, declared, 0, tenant::refusal(r), pace, untrusted)
            .await
    }

    pub(super) async fn body_refusal<B>(
        &self,
        e: BodyError,
        incoming: Pin<&mut B>,
        declared: Option<u64>,
    ) -> Response<GatewayBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let limit = self.config.uploads.max_request_body_bytes();
        let mut resp = match e {
            BodyError::BudgetExhausted { read } => {
                Counters::bump(&self.upload_counters.refusals_budget);
                let resp = reply::refusal(
                    GatewayRefusal::UploadBudgetExhausted,
                    Mark::Marked,
                    "the gateway's request body budget is spent; retry shortly",
                );
                // Read at the pace of a forwarded body, so the client that sends its body
                // first gets the refusal, and the connection stays usable.
                let pace = Pace::forwarded(&self.config.uploads);
                return self
                    .refuse_after_drain(incoming, declared, read, resp, pace, None)
                    .await;
            }
            BodyError::TooLarge => {
                Counters::bump(&self.upstreams.counters.body_too_large);
                reply::refusal(
                    GatewayRefusal::RequestBodyTooLarge,
                    Mark::Marked,
                    &format!("the request body is over the gateway's {limit}-byte limit"),
                )
            }
            BodyError::TooSlow => {
                Counters::bump(&self.upload_counters.refusals_too_slow);
                reply::refusal(
                    GatewayRefusal::RequestBodyTooSlow,
                    Mark::Marked,
                    "the request body stopped arriving, or arrived too slowly",
                )
            }
            BodyError::Unreadable(why) => reply::refusal(
                GatewayRefusal::RequestBodyUnreadable,
                Mark::Marked,
                &format!("could not read the request body: {why}"),
            ),
        };
        // The rest of the body stays unread: the connection cannot carry another request.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }

    /// Sends `resp`, a refusal decided from the request's head alone, after draining the body
    /// at the head refusal's pace.
    pub(super) async fn refuse_from_head<B>(
        &self,
        incoming: Pin<&mut B>,
        declared: Option<u64>,
        resp: Response<GatewayBody>,
        untrusted: Option<IpAddr>,
    ) -> Response<GatewayBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let pace = Pace::HEAD_REFUSAL;
        self.refuse_after_drain(incoming, declared, 0, resp, pace, untrusted)
            .await
    }

    /// Sends `resp`, a refusal decided before the body was read, once the rest of the body
    /// was read and dropped; a body not read to its end closes the connection. `untrusted`:
    /// the client address an untrusted request's reading counts against.
    pub(super) async fn refuse_after_drain<B>(
        &self,
        incoming: Pin<&mut B>,
        declared: Option<u64>,
        read_before: u64,
        mut resp: Response<GatewayBody>,
        pace: Pace,
        untrusted: Option<IpAddr>,
    ) -> Response<GatewayBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        if incoming.is_end_stream() && read_before == 0 {
            return resp;
        }
        let c = &self.upload_counters;
        Counters::bump(&c.refusal_drains);
        let drained = self
            .drain_body(incoming, declared, read_before, pace, untrusted)
            .await;
        c.refusal_drain_bytes
            .fetch_add(drained.bytes, Ordering::Relaxed);
        if !drained.complete {
            Counters::bump(&c.refusal_drains_cut);
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }

    /// Reads and drops the rest of a body the gateway does not forward, at `pace`. An
    /// untrusted request's body is read only with one of its address's slots; without one it
    /// is left unread.
    pub(super) async fn drain_body<B>(
        &self,
        incoming: Pin<&mut B>,
        declared: Option<u64>,
        read_before: u64,
        pace: Pace,
        untrusted: Option<IpAddr>,
    ) -> Drained
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let _slot = match untrusted.map(|ip| self.address_slots.take(ip)) {
            Some(None) => {
                Counters::bump(&self.upload_counters.untrusted_bodies_unread);
                return Drained {
                    bytes: 0,
                    complete: false,
                };
            }
            Some(Some(slot)) => Some(slot),
            None => None,
        };
        let limit = self.config.uploads.max_request_body_bytes();
        body::drain(incoming, declared, read_before, limit, pace).await
    }
}
