//! SQL functions, registered on the connection that loaded the extension. Direct-only: a
//! trigger or view cannot call them.

use std::ops::RangeInclusive;
use std::os::raw::c_int;

use rusqlite::Connection;
use rusqlite::functions::Context;
use rusqlite::functions::FunctionFlags;
use rusqlite::functions::SqlFnOutput;
use rusqlite::types::ValueRef;

use ursula_protocol::offset::Offset;

use crate::attach;
use crate::error::Kind;
use crate::error::VfsError;
use crate::format::offset_text;
use crate::mode::Mode;
use crate::naming;
use crate::point_in_time;
use crate::registry;
use crate::settings;
use crate::token;

fn fail(function: &str, e: &VfsError) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(e.code),
        Some(format!("{function}: {}: {}", e.kind.as_str(), e.message)),
    )
}

fn text_arg(ctx: &Context<'_>, i: usize, function: &str) -> rusqlite::Result<String> {
    ctx.get::<Option<String>>(i)?.ok_or_else(|| {
        fail(
            function,
            &VfsError::new(
                Kind::InvalidArgument,
                format!("argument {} must be text", i + 1),
            ),
        )
    })
}

/// Looks a path up for `status`/`stats`, naming a failed attach's reason.
fn attached(function: &str, path: &str) -> rusqlite::Result<std::sync::Arc<crate::db::Db>> {
    let canon = registry::canonical(path);
    let reg = registry::global();
    if let Some(db) = reg.attached(&canon) {
        return Ok(db);
    }
    let e = match reg.failed(&canon) {
        Some((kind, reason)) => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(1),
            Some(format!(
                "{function}: attach_failed: {}: {} is not attached: its last attach failed ({reason})",
                kind.as_str(),
                canon.display()
            )),
        ),
        None => fail(
            function,
            &VfsError::new(
                Kind::NotAttached,
                format!("{} is not attached in this process", canon.display()),
            ),
        ),
    };
    Err(e)
}

fn guard<T>(name: &str, f: impl FnOnce() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            crate::log::panic(name, p.as_ref());
            Err(fail(
                name,
                &VfsError::new(
                    Kind::Internal,
                    "the extension panicked; see the panic event on stderr",
                ),
            ))
        }
    }
}

/// `ursula_commits`' optional `from` (an offset as text; NULL or `'-1'` for every commit) and
/// `limit` (a positive integer; NULL for the default).
/// A whole number given as INTEGER or, as node:sqlite binds every JavaScript number, as a REAL
/// with no fraction; `None` for anything else (NULL included).
fn whole_number(value: ValueRef<'_>) -> Option<i64> {
    match value {
        ValueRef::Integer(n) => Some(n),
        // The range check keeps the cast exact: within it every whole f64 is an i64.
        ValueRef::Real(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Some(x as i64),
        _ => None,
    }
}

fn commits_args(ctx: &Context<'_>) -> Result<(Option<Offset>, u64), VfsError> {
    let from = match ctx.len() {
        2.. => match ctx.get::<Option<String>>(1) {
            Ok(None) => None,
            Ok(Some(t)) => offset_text::parse(&t).ok_or_else(|| {
                VfsError::new(
                    Kind::InvalidArgument,
                    format!("from must be a stream offset (20 digits) or -1, not {t:?}"),
                )
            })?,
            Err(_) => {
                return Err(VfsError::new(
                    Kind::InvalidArgument,
                    "from must be text: a stream offset (20 digits) or -1",
                ));
            }
        },
        _ => None,
    };
    let limit = match ctx.len() {
        3.. => match ctx.get_raw(2) {
            ValueRef::Null => point_in_time::DEFAULT_LIMIT,
            v => match whole_number(v).and_then(|n| u64::try_from(n).ok()) {
                Some(n) if n > 0 => n,
                _ => {
                    return Err(VfsError::new(
                        Kind::InvalidArgument,
                        "limit must be a positive integer",
                    ));
                }
            },
        },
        _ => point_in_time::DEFAULT_LIMIT,
    };
    Ok((from, limit))
}

/// Registers the SQL function `name`, direct-only, its body run under [`guard`] and given
/// `name` for its error messages.
fn scalar<T: SqlFnOutput>(
    conn: &Connection,
    name: &'static str,
    n_arg: c_int,
    body: impl Fn(&Context<'_>, &str) -> rusqlite::Result<T> + Send + 'static,
) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DIRECTONLY;
    conn.create_scalar_function(name, n_arg, flags, move |ctx| {
        guard(name, || body(ctx, name))
    })
}

/// Refuses a call with a count of arguments outside `counts`; `takes` names the arguments.
fn arity(
    ctx: &Context<'_>,
    counts: RangeInclusive<usize>,
    function: &str,
    takes: &str,
) -> rusqlite::Result<()> {
    if counts.contains(&ctx.len()) {
        return Ok(());
    }
    Err(fail(function, &VfsError::new(Kind::InvalidArgument, takes)))
}

pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    scalar(conn, "ursula_attach", -1, |ctx, f| {
        arity(ctx, 2..=3, f, "takes (path, url[, mode])")?;
        let path = text_arg(ctx, 0, f)?;
        let url = text_arg(ctx, 1, f)?;
        let mode = match ctx.len() {
            3 => Mode::parse(&text_arg(ctx, 2, f)?).map_err(|e| fail(f, &e))?,
            _ => Mode::Owner,
        };
        attach::attach(&path, &url, mode).map_err(|e| fail(f, &e))
    })?;
    scalar(conn, "ursula_status", 1, |ctx, f| {
        let path = text_arg(ctx, 0, f)?;
        let db = attached(f, &path)?;
        Ok(db
            .status_json(settings::get().snapshot_min_bytes)
            .to_string())
    })?;
    scalar(conn, "ursula_stats", 1, |ctx, f| {
        let path = text_arg(ctx, 0, f)?;
        let db = attached(f, &path)?;
        Ok(db.drain_stats_json().to_string())
    })?;
    scalar(conn, "ursula_commits", -1, |ctx, f| {
        arity(ctx, 1..=3, f, "takes (url[, from[, limit]])")?;
        let url = text_arg(ctx, 0, f)?;
        let (from, limit) = commits_args(ctx).map_err(|e| fail(f, &e))?;
        attach::commits(&url, from, limit)
            .map(|v| v.to_string())
            .map_err(|e| fail(f, &e))
    })?;
    scalar(conn, "ursula_file_name", -1, |ctx, f| {
        let reader = match ctx.len() {
            1 => 0,
            2 => match whole_number(ctx.get_raw(1)).and_then(|n| u32::try_from(n).ok()) {
                Some(n) => n,
                None => {
                    let e = VfsError::new(
                        Kind::InvalidArgument,
                        "the reader index is an integer from 0 (the owner) up",
                    );
                    return Err(fail(f, &e));
                }
            },
            _ => {
                let e = VfsError::new(Kind::InvalidArgument, "takes (url[, reader])");
                return Err(fail(f, &e));
            }
        };
        let url = text_arg(ctx, 0, f)?;
        let n = naming::name_stream(&url)
            .map_err(|e| fail(f, &VfsError::new(Kind::InvalidUrl, e.to_string())))?;
        let answer = serde_json::json!({
            "identity": n.identity,
            "url": n.url,
            "file": n.file_name(reader),
        });
        Ok(answer.to_string())
    })?;
    scalar(conn, "ursula_set_token", 1, |ctx, _| {
        let t: Option<String> = ctx.get(0)?;
        token::set_token(t.filter(|t| !t.is_empty()));
        Ok(true)
    })?;
    Ok(())
}
