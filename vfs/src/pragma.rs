//! PRAGMAs refused before they run. SQLite sends every PRAGMA on an attached file to its VFS
//! first (`SQLITE_FCNTL_PRAGMA`), while the statement is prepared, so a refusal there fails the
//! statement and leaves the connection as it was.
//!
//! Why up front: `PRAGMA journal_mode=DELETE` (or TRUNCATE, PERSIST, MEMORY, OFF) on a WAL
//! database checkpoints and deletes the `-wal`, then rewrites page 1 through a rollback
//! journal. The extension refuses that write (it would reach the file and not the stream), and
//! SQLite's pager is left with a hot `-journal` whose rollback writes the database file too,
//! which is refused again: every later statement on the connection, reads included, would fail
//! with a disk I/O error until it is closed. MEMORY and OFF keep their journal in memory, so
//! their connection recovers, but the statement still fails with a bare disk I/O error.

/// SQLite's journal mode names, in the order its parser tries them (`sqlite3JournalModename`).
const MODES: [&str; 6] = ["delete", "persist", "off", "truncate", "memory", "wal"];

/// The mode `PRAGMA journal_mode=<arg>` sets, by SQLite's rule: the first name that `arg` is a
/// case-insensitive prefix of (so `''` is `delete`); `None` for a query (no argument, or one
/// that names no mode).
fn journal_mode(arg: Option<&str>) -> Option<&'static str> {
    let arg = arg?;
    MODES.into_iter().find(|m| {
        arg.len() <= m.len() && m.as_bytes()[..arg.len()].eq_ignore_ascii_case(arg.as_bytes())
    })
}

/// The error message of a PRAGMA the extension refuses on an attached file, or `None` to let
/// SQLite run it. Shaped `sqlite-ursula-vfs: <kind>: <message>`, which the npm package reads
/// to throw an `UrsulaSetupError` of that kind.
pub fn refusal(name: &str, arg: Option<&str>) -> Option<String> {
    if !name.eq_ignore_ascii_case("journal_mode") {
        return None;
    }
    match journal_mode(arg) {
        None | Some("wal") => None,
        Some(mode) => Some(format!(
            "sqlite-ursula-vfs: unsupported: PRAGMA journal_mode={mode} refused: journal_mode must stay WAL, since the stream replicates the database through its WAL. Nothing changed: the database stays in WAL mode and usable (remove the PRAGMA)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_modes_other_than_wal_are_refused_as_sqlite_spells_them() {
        for (arg, mode) in [
            ("DELETE", "delete"),
            ("memory", "memory"),
            ("Off", "off"),
            ("trunc", "truncate"),
            ("p", "persist"),
            ("", "delete"),
        ] {
            let m = refusal("journal_mode", Some(arg)).expect("refused");
            assert!(
                m.starts_with(&format!(
                    "sqlite-ursula-vfs: unsupported: PRAGMA journal_mode={mode} refused: journal_mode must stay WAL"
                )),
                "{arg}: {m}"
            );
        }
        assert!(refusal("JOURNAL_MODE", Some("delete")).is_some());
    }

    #[test]
    fn wal_queries_and_other_pragmas_pass() {
        for arg in [
            None,
            Some("wal"),
            Some("WAL"),
            Some("w"),
            Some("walx"),
            Some("nonsense"),
        ] {
            assert_eq!(refusal("journal_mode", arg), None, "{arg:?}");
        }
        assert_eq!(refusal("page_size", Some("8192")), None);
        assert_eq!(refusal("locking_mode", Some("exclusive")), None);
    }
}
