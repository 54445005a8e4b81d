"""Connections and cursors whose failures raise Ursula errors.

`connect` returns an instance of a subclass of the driver's own `Connection` (so `isinstance`
holds and every DB-API method is there) whose `execute`, `executemany`, `executescript`,
`commit` and `rollback`, and whose cursors' `execute`, `executemany`, `executescript`,
`fetchone`, `fetchmany`, `fetchall` and iteration, turn the extension's failures into Ursula
errors (`classify_statement_error`). Other errors (constraints, syntax, a write to a read-only
connection) are the driver's own, unchanged.

The ROLLBACK rule of the npm package: after an Ursula error SQLite has already rolled back, so
while that error is kept a statement that fails with "cannot rollback - no transaction is active"
or "no such savepoint" is replaced: a plain `ROLLBACK` through `execute` succeeds and does
nothing, and `ROLLBACK TO`, `RELEASE` or a script throw the kept error again. The kept error is
dropped when any other statement runs.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ._driver import status_of
from ._errors import SQLITE_ERROR, UrsulaError, classify_statement_error

_LEADING = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*[\s\S]*?\*/)+")
# First words of statements that only read: an I/O error of theirs is a read's (fenced read)
# when the driver reports only SQLite's primary code (see classify_statement_error).
_READ_WORDS = frozenset({"SELECT", "VALUES", "WITH", "EXPLAIN"})


def rollback_kind(sql: object) -> str | None:
    """Which statements the ROLLBACK rule covers: `rollback`, `rollback_to`, `release` or None."""
    if not isinstance(sql, str):
        return None
    s = _LEADING.sub("", sql, count=1)
    if re.match(r"ROLLBACK(?:\s+TRANSACTION)?\s*(?:;\s*)?\Z", s, re.I):
        return "rollback"
    if re.match(r"ROLLBACK\b", s, re.I):
        return "rollback_to"
    if re.match(r"RELEASE\b", s, re.I):
        return "release"
    return None


def statement_op(sql: object) -> str:
    """`read` for a statement that starts with a reading keyword, else `write`."""
    if not isinstance(sql, str):
        return "write"
    words = _LEADING.sub("", sql, count=1).split(None, 1)
    return "read" if words and words[0].upper() in _READ_WORDS else "write"


def _no_transaction(e: BaseException) -> bool:
    return (
        getattr(e, "sqlite_errorcode", None) == SQLITE_ERROR
        and re.search(r"no transaction is active|no such savepoint", str(e)) is not None
    )


class State:
    """What a connection's classification needs: the attached file and the kept error."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.kept: UrsulaError | None = None


def _guarded(
    state: State | None,
    rb: str | None,
    op: str,
    fn: Callable[[], Any],
    noop: Callable[[], Any] | None = None,
) -> Any:
    if state is None:
        return fn()
    try:
        result = fn()
    except UrsulaError:
        # Classified already, by a cursor method the driver called for this one.
        raise
    except Exception as error:
        if state.kept is not None and rb is not None and _no_transaction(error):
            if rb == "rollback" and noop is not None:
                return noop()
            # The same error object again, its cause unchanged (the npm package throws it again too).
            raise state.kept  # noqa: B904
        c = classify_statement_error(error, status_of, state.file, op)
        if isinstance(c, UrsulaError):
            state.kept = c
            raise c from error
        if rb is None:
            state.kept = None
        raise
    if rb is None:
        state.kept = None
    return result


def _state(conn: Any) -> State | None:
    return getattr(conn, "_ursula", None)


class _CursorMixin:
    """The classified cursor methods; mixed into the driver's Cursor class."""

    connection: Any  # the driver's Cursor attribute: the connection that made the cursor
    _ursula_rb: str | None = None  # the ROLLBACK rule's kind of the statement last executed

    def _run(self, op: str, fn: Callable[[], Any], noop: Callable[[], Any] | None = None) -> Any:
        return _guarded(_state(self.connection), self._ursula_rb, op, fn, noop)

    def execute(self, sql: str, *args: Any) -> Any:
        self._ursula_rb = rollback_kind(sql)
        base = super().execute  # type: ignore[misc]
        return self._run(statement_op(sql), lambda: base(sql, *args), lambda: self)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._ursula_rb = rollback_kind(sql)
        base = super().executemany  # type: ignore[misc]
        return self._run("write", lambda: base(sql, *args), lambda: self)

    def executescript(self, script: str) -> Any:
        self._ursula_rb = rollback_kind(script)
        base = super().executescript  # type: ignore[misc]
        return self._run("write", lambda: base(script))

    def fetchone(self) -> Any:
        return self._run("read", super().fetchone, lambda: None)  # type: ignore[misc]

    def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
        base = super().fetchmany  # type: ignore[misc]
        return self._run("read", lambda: base(*args, **kwargs), list)

    def fetchall(self) -> Any:
        return self._run("read", super().fetchall, list)  # type: ignore[misc]

    def __next__(self) -> Any:
        return self._run("read", super().__next__, _stop)  # type: ignore[misc]


def _stop() -> Any:
    raise StopIteration


class _ConnectionMixin:
    """The classified connection methods; mixed into the driver's (or the caller's) Connection."""

    _cursor_class: type
    _ursula: State

    def cursor(self, factory: type | None = None) -> Any:
        cls = self._cursor_class if factory is None else _classified(factory, _CursorMixin, "Cursor")
        return super().cursor(cls)  # type: ignore[misc]

    def execute(self, sql: str, *args: Any) -> Any:
        base = super().execute  # type: ignore[misc]
        return _guarded(
            _state(self), rollback_kind(sql), statement_op(sql), lambda: base(sql, *args), self.cursor
        )

    def executemany(self, sql: str, *args: Any) -> Any:
        base = super().executemany  # type: ignore[misc]
        return _guarded(_state(self), rollback_kind(sql), "write", lambda: base(sql, *args), self.cursor)

    def executescript(self, script: str) -> Any:
        base = super().executescript  # type: ignore[misc]
        return _guarded(_state(self), rollback_kind(script), "write", lambda: base(script))

    def commit(self) -> None:
        _guarded(_state(self), None, "write", super().commit)  # type: ignore[misc]

    def rollback(self) -> None:
        _guarded(_state(self), "rollback", "write", super().rollback, lambda: None)  # type: ignore[misc]


_classes: dict[tuple[type, type], type] = {}


def _classified(base: type, mixin: type, what: str) -> type:
    """`base` with the classified methods in front, one class per base."""
    if issubclass(base, mixin):
        return base
    key = (base, mixin)
    if key not in _classes:
        _classes[key] = type(f"Ursula{what}", (mixin, base), {"__module__": "sqlite_ursula"})
    return _classes[key]


def connection_class(module: Any, factory: type | None = None) -> type:
    """The classified Connection class of `module` (or of `factory`, a subclass of its Connection)."""
    cls = _classified(factory or module.Connection, _ConnectionMixin, "Connection")
    cls._cursor_class = _classified(module.Cursor, _CursorMixin, "Cursor")  # type: ignore[attr-defined]
    return cls
