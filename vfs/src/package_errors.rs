//! The table the npm and Python packages classify the extension's failures by: for each kind,
//! the action it asks for and the error class that carries it, and the sentences the classified
//! errors say. This is its one source; `js/src/error-table.json` and
//! `python/src/sqlite_ursula/_error_table.json` are generated from [`table`] (format version 1,
//! `docs/sqlite-vfs.md`, "The packages' error table"), and the test below fails when either
//! copy differs from it.

use serde_json::Value;
use serde_json::json;

use crate::error::Action;
use crate::error::Kind;

/// Layout version of the generated table; bumped when a field changes meaning.
pub const TABLE_VERSION: u32 = 1;

/// Every kind, in the order the table lists them.
pub const KINDS: [Kind; 26] = [
    Kind::InvalidArgument,
    Kind::InvalidUrl,
    Kind::InvalidName,
    Kind::NotFound,
    Kind::InUse,
    Kind::UnreplicatedFile,
    Kind::OtherStream,
    Kind::Unsupported,
    Kind::StreamState,
    Kind::NotAttached,
    Kind::LocalSetup,
    Kind::Unauthorized,
    Kind::Forbidden,
    Kind::RateLimited,
    Kind::NotApplied,
    Kind::Unreachable,
    Kind::Refused,
    Kind::Unavailable,
    Kind::PaymentRequired,
    Kind::TooLarge,
    Kind::OutcomeUnknown,
    Kind::LocalDamage,
    Kind::LocalState,
    Kind::Internal,
    Kind::Fenced,
    Kind::Retained,
];

/// The action a failed attach or SQL call of this kind asks for.
pub fn action(kind: Kind) -> Action {
    match kind {
        Kind::Unauthorized
        | Kind::Forbidden
        | Kind::RateLimited
        | Kind::NotApplied
        | Kind::Unreachable
        | Kind::Refused
        | Kind::Unavailable
        | Kind::PaymentRequired => Action::Retry,
        Kind::OutcomeUnknown | Kind::LocalDamage | Kind::LocalState | Kind::Internal => {
            Action::Reattach
        }
        Kind::Fenced => Action::Stop,
        _ => Action::Fix,
    }
}

/// The error class of that failure, without the language's prefix (`UrsulaWriteRefusedError`
/// is `write_refused`). A 402 is `payment_required` only where the SQLite code says so (an
/// attach's `SQLITE_AUTH`); the packages show it as `refused` elsewhere.
pub fn error_class(kind: Kind) -> &'static str {
    match (kind, action(kind)) {
        (Kind::PaymentRequired, _) => "payment_required",
        (Kind::TooLarge, _) | (_, Action::Retry) => "write_refused",
        (_, Action::Reattach) => "reattach",
        (_, Action::Stop) => "fenced",
        (_, Action::Fix) => "setup",
    }
}

/// What refused a commit, by `refused_kind`.
const REFUSED_BY: [(Kind, &str); 8] = [
    (
        Kind::PaymentRequired,
        "commit refused with 402 Payment Required in front of the stream",
    ),
    (
        Kind::Unauthorized,
        "commit refused with 401 Unauthorized: the stream refused the token",
    ),
    (
        Kind::Forbidden,
        "commit refused with 403 Forbidden in front of the stream",
    ),
    (
        Kind::RateLimited,
        "commit refused with 429 Too Many Requests in front of the stream",
    ),
    (
        Kind::NotApplied,
        "commit refused before it reached the stream, marked as not applied",
    ),
    (
        Kind::Unreachable,
        "commit not sent: the stream could not be reached",
    ),
    (
        Kind::Unavailable,
        "commit refused before it reached the stream",
    ),
    (Kind::Refused, "commit refused before it reached the stream"),
];

/// The sentences of the classified errors. `{reason}` is the extension's words; `{reopen}` is
/// how the package says "attach again" (`open it again` in npm, `connect again` in Python).
const MESSAGES: [(&str, &str); 10] = [
    (
        "retry_tail",
        "Nothing of it reached the stream, and the database stays usable: run it again later, the whole transaction if it was one.",
    ),
    (
        "stop_tail",
        "Another owner took the stream over: stop using this database, and never reopen it in a loop.",
    ),
    (
        "reattach_tail",
        "The local file may no longer match the stream: close the database and {reopen}, which replays the stream.",
    ),
    (
        "fix_tail",
        "Fix the cause, then close the database and {reopen}.",
    ),
    (
        "too_large",
        "commit refused: the transaction is too large for one append: {reason}. Nothing of it reached the stream, and the database stays usable: split the transaction into smaller ones.",
    ),
    (
        "unsupported",
        "commit refused: {reason}. Nothing of it reached the stream, and the database stays usable: change the setup (see Rules), then run it again.",
    ),
    (
        "refused_setup",
        "commit refused: {reason}. Nothing of it reached the stream: change the setup (see Rules), then run it again.",
    ),
    ("not_replicated", "commit not replicated"),
    ("fenced_read", "read refused, the file is fenced"),
    (
        "stopped_following",
        "read refused, the replica stopped following the stream",
    ),
];

/// The whole table, as the packages' copies hold it.
pub fn table() -> Value {
    let kinds: serde_json::Map<String, Value> = KINDS
        .iter()
        .map(|&k| {
            let entry = json!({"action": action(k), "error": error_class(k)});
            (k.as_str().to_owned(), entry)
        })
        .collect();
    let refused_by: serde_json::Map<String, Value> = REFUSED_BY
        .iter()
        .map(|(k, text)| (k.as_str().to_owned(), json!(text)))
        .collect();
    let messages: serde_json::Map<String, Value> = MESSAGES
        .iter()
        .map(|(name, text)| ((*name).to_owned(), json!(text)))
        .collect();
    json!({
        "version": TABLE_VERSION,
        "generated_from": "vfs/src/package_errors.rs: UPDATE_ERROR_TABLE=1 cargo test -p sqlite-ursula-vfs package_errors",
        "kinds": kinds,
        "refused_by": refused_by,
        "messages": messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const COPIES: [&str; 2] = [
        "../js/src/error-table.json",
        "../python/src/sqlite_ursula/_error_table.json",
    ];

    #[test]
    fn the_packages_copies_of_the_error_table_are_the_table() {
        let want = format!(
            "{}\n",
            serde_json::to_string_pretty(&table()).expect("the table is JSON")
        );
        for copy in COPIES {
            let path = format!("{}/{copy}", env!("CARGO_MANIFEST_DIR"));
            if std::env::var_os("UPDATE_ERROR_TABLE").is_some() {
                std::fs::write(&path, &want).unwrap_or_else(|e| panic!("{path}: {e}"));
            }
            let got = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                got == want,
                "{copy} differs from package_errors::table(): regenerate with \
                 UPDATE_ERROR_TABLE=1 cargo test -p sqlite-ursula-vfs package_errors"
            );
        }
    }

    #[test]
    fn every_kind_is_in_the_table_once() {
        let t = table();
        assert_eq!(
            t["kinds"].as_object().expect("kinds is an object").len(),
            KINDS.len()
        );
        assert_eq!(t["kinds"]["fenced"]["action"], "stop");
        assert_eq!(t["kinds"]["too_large"]["error"], "write_refused");
        assert_eq!(t["kinds"]["too_large"]["action"], "fix");
        assert_eq!(t["kinds"]["internal"]["error"], "reattach");
        assert_eq!(t["kinds"]["retained"]["error"], "setup");
    }
}
