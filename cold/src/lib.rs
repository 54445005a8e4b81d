//! The object-store layer of Ursula's cold tier (spec: Configuration, cold storage; Operations,
//! format epoch). Built on `object_store`, not the AWS SDK, for build time (docs/cold-tier.md).
//!
//! - `config`: [`ColdConfig`], [`BackendConfig`] (`memory`, `fs`, `s3`), [`Sse`], and how they
//!   become an object_store client: credentials, path-style addressing, SSE headers, timeouts.
//! - `store`: [`ColdStore`]: keys relative to `storage.cold.root`, put/get/range/delete/list (keys, or
//!   [`Listed`] objects with size and write time), the health probe and the `URSULA_FORMAT_EPOCH` startup check.
//! - `error`: [`ColdError`] and how object_store's errors map onto it.
//! - `testing` (feature `test-support`): [`testing::SeaweedFs`], a real S3 server on loopback.

mod config;
mod error;
mod store;
#[cfg(feature = "test-support")]
pub mod testing;

pub use config::{BackendConfig, ColdConfig, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, S3Config, Sse};
pub use error::{BoxError, ColdError};
pub use store::{ColdStore, Listed};

/// The marker object at the cold root that records the epoch.
pub use ursula_protocol::format::COLD_EPOCH_MARKER as FORMAT_EPOCH_MARKER;
/// The format epoch this release reads and writes (spec: "Format epoch 3, no migration").
pub use ursula_protocol::format::FORMAT_EPOCH;
