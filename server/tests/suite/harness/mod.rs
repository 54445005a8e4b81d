//! What the suites share. Dependencies point one way: `ports` and `scratch` stand alone;
//! `cluster` and `gateway` start real processes on them; `auth` builds on `gateway`, `ctl` on
//! `cluster`; `router` drives the router in process and starts nothing.

pub mod auth;
pub mod cluster;
pub mod ctl;
pub mod gateway;
pub mod ports;
pub mod router;
pub mod scratch;
