//! The gateway's integration tests: one test binary (`cargo nextest run -p ursula-gateway`), a
//! module a suite. All but `redirects` run `ursula gateway` and `ursula server` as real
//! processes of this build's `ursula` (`cargo nextest run --workspace` builds it).
//!
//! Module map:
//! - `harness`: the workspace's harness (`ursula-testkit`), plus calls as one caller, the
//!   pieces of an access-controlled stack and a gateway refused at startup.
//! - `redirects`: the redirect rule in process, against scripted upstreams.
//! - `gateway`: creates, appends, reads and live tails through the gateway to real nodes.
//! - `gateway_auth`, `gateway_oidc`, `gateway_auth_fuzz`, `gateway_security`: access control
//!   with hand-signed tokens, against a real OIDC issuer, fuzzed credentials, replayed attacks.
//! - `gateway_cors`, `gateway_h2`: CORS for pages, h2c beside HTTP/1.1.
//! - `gateway_tenants`, `gateway_uploads`: quotas and usage, and the bounds on what clients
//!   and upstreams can hold.

mod harness;

mod gateway;
mod gateway_auth;
mod gateway_auth_fuzz;
mod gateway_cors;
mod gateway_h2;
mod gateway_oidc;
mod gateway_security;
mod gateway_tenants;
mod gateway_uploads;
mod redirects;
