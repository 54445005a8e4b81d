//! Failure kinds and the actions they call for, as `status(file).error` and the JS error classes
//! report them.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Nothing reached the stream; the file stays usable.
    Retry,
    /// The local file may not match the stream: attach again.
    Reattach,
    /// Another owner holds the stream.
    Stop,
    /// The request cannot succeed as made.
    Fix,
}

/// Kinds of failure, with the names the spec gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    InvalidArgument,
    InvalidUrl,
    InvalidName,
    NotFound,
    InUse,
    UnreplicatedFile,
    OtherStream,
    Unsupported,
    StreamState,
    NotAttached,
    LocalSetup,
    Unauthorized,
    Forbidden,
    RateLimited,
    NotApplied,
    Unreachable,
    Refused,
    Unavailable,
    PaymentRequired,
    TooLarge,
    OutcomeUnknown,
    LocalDamage,
    LocalState,
    Internal,
    Fenced,
    /// A point-in-time attach below the earliest point the stream can rebuild.
    Retained,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::InvalidArgument => "invalid_argument",
            Kind::InvalidUrl => "invalid_url",
            Kind::InvalidName => "invalid_name",
            Kind::NotFound => "not_found",
            Kind::InUse => "in_use",
            Kind::UnreplicatedFile => "unreplicated_file",
            Kind::OtherStream => "other_stream",
            Kind::Unsupported => "unsupported",
            Kind::StreamState => "stream_state",
            Kind::NotAttached => "not_attached",
            Kind::LocalSetup => "local_setup",
            Kind::Unauthorized => "unauthorized",
            Kind::Forbidden => "forbidden",
            Kind::RateLimited => "rate_limited",
            Kind::NotApplied => "not_applied",
            Kind::Unreachable => "unreachable",
            Kind::Refused => "refused",
            Kind::Unavailable => "unavailable",
            Kind::PaymentRequired => "payment_required",
            Kind::TooLarge => "too_large",
            Kind::OutcomeUnknown => "outcome_unknown",
            Kind::LocalDamage => "local_damage",
            Kind::LocalState => "local_state",
            Kind::Internal => "internal",
            Kind::Fenced => "fenced",
            Kind::Retained => "retained",
        }
    }

    /// What a poison of this kind asks the user to do.
    pub fn poison_action(self) -> Action {
        match self {
            Kind::Fenced => Action::Stop,
            Kind::OutcomeUnknown | Kind::LocalDamage | Kind::LocalState | Kind::Internal => {
                Action::Reattach
            }
            _ => Action::Fix,
        }
    }
}

/// A failed attach or SQL call: kind plus a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind_str}: {message}", kind_str = self.kind.as_str())]
pub struct VfsError {
    pub kind: Kind,
    pub message: String,
    /// SQLite result code the SQL function fails with.
    pub code: i32,
}

pub const SQLITE_ERROR: i32 = 1;
pub const SQLITE_AUTH: i32 = 23;
pub const SQLITE_IOERR_AUTH: i32 = 10 | (28 << 8);
pub const SQLITE_IOERR_WRITE: i32 = 10 | (3 << 8);
pub const SQLITE_IOERR_READ: i32 = 10 | (1 << 8);

impl VfsError {
    pub fn new(kind: Kind, message: impl Into<String>) -> VfsError {
        VfsError {
            kind,
            message: message.into(),
            code: SQLITE_ERROR,
        }
    }

    pub fn with_code(mut self, code: i32) -> VfsError {
        self.code = code;
        self
    }
}
