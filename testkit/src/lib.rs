//! The harness the workspace's integration tests share: the server's (`server/tests/suite`),
//! the gateway's (`gateway/tests/suite`), `ursulactl`'s (`ctl/tests/suite`) and the
//! extension's (`ursula-vfs-tests`). Everything it starts is a real process on loopback.
//!
//! Module map (dependencies point down the list):
//! - `ports`: loopback ports below the kernel's ephemeral range.
//! - `scratch`: one scratch directory per test, kept when the test fails.
//! - `bins`: the `ursula` and `ursulactl` binaries of the build under test.
//! - `http`: an agent that reports every status, and one request's status, headers and body.
//! - `process`: a child's exit within a deadline, and waiting until it answers HTTP.
//! - `conn`: raw connections that never finish a request head, and whether one was closed.
//! - `cluster`: `ursula` nodes on the Raft engine: single durable nodes and static clusters,
//!   killed, stopped and restarted on their WAL; requests that follow 307s.
//! - `gateway`: `ursula gateway` in front of nodes; raw HTTP/1.1 requests.
//! - `auth`: an issuer (RFC 8414 metadata, a JWKS it can rotate) and hand-signed tokens.
//! - `ctl`: the real `ursulactl` against a 3-voter cluster and its manifest.

pub mod auth;
pub mod bins;
pub mod cluster;
pub mod conn;
pub mod ctl;
pub mod gateway;
pub mod http;
pub mod ports;
pub mod process;
pub mod scratch;
