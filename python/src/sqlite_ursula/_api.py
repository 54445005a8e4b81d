"""attach, status, drain_stats, set_token: the extension's SQL functions, with Ursula errors."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Union

from ._driver import call, status_of
from ._errors import setup_error

PathLike = Union[str, "os.PathLike[str]"]


def path_text(fn: str, what: str, value: object) -> str:
    """A str or os.PathLike as str; anything else is invalid_argument."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str):
            return text
    raise setup_error(
        fn, "invalid_argument", f"{what} must be a str or os.PathLike of str, not {type(value).__name__}"
    )


_OFFSET = re.compile(r"-1|\d{20}")


def check_offset(fn: str, what: str, value: object) -> str:
    """A stream offset as the server writes it (20 digits) or `-1`, as a str."""
    if not isinstance(value, str) or not _OFFSET.fullmatch(value):
        raise setup_error(
            fn, "invalid_argument", f"{what} must be a stream offset as a str (20 digits, or '-1'), not {value!r}"
        )
    return value


def attach_mode(fn: str, read_only: bool, follow: bool, at: str | None = None) -> str:
    """`ursula_attach`'s third argument for these options (`''`: the owner); the extension
    parses it, so every binding accepts the same modes."""
    if not isinstance(read_only, bool):
        raise setup_error(fn, "invalid_argument", "read_only must be a bool")
    if not isinstance(follow, bool):
        raise setup_error(fn, "invalid_argument", "follow must be a bool")
    if at is not None:
        check_offset(fn, "at", at)
        if not read_only:
            raise setup_error(
                fn,
                "invalid_argument",
                "at needs read_only=True: a point-in-time database is a past state of the stream, and "
                "never writes it",
            )
        if follow:
            raise setup_error(
                fn,
                "invalid_argument",
                "follow and at exclude each other: a replica follows the stream's tail, an at-open stays "
                "at one point",
            )
        return f"at:{at}"
    if follow and not read_only:
        raise setup_error(
            fn,
            "invalid_argument",
            "follow makes a live read replica and needs read_only=True; the owner of the stream "
            "already has every commit",
        )
    if follow:
        return "follow"
    return "read_only" if read_only else ""


def attach(path: PathLike, url: str, read_only: bool = False, follow: bool = False, at: str | None = None) -> str:
    """Catches `path` up from the stream at `url`, claims the stream (unless `read_only`) and
    attaches the file: `SELECT ursula_attach(path, url, mode)`. With `follow` (and `read_only`)
    the file then keeps applying the owner's commits (a live read replica); with `at` (and
    `read_only`) it is the database as it was after the last commit at or before that stream
    offset. No connection to the
    file may be open yet. Returns the stream offset the file reflects (`"-1"`: none)."""
    file = path_text("attach", "path", path)
    if not isinstance(url, str):
        raise setup_error("attach", "invalid_url", "the stream URL must be a str")
    mode = attach_mode("attach", read_only, follow, at)
    return str(call("SELECT ursula_attach(?, ?, ?)", file, url, mode))


def file_of(fn: str, target: object) -> str:
    """The attached file a status call is about: a path, or a connection `connect` returned (or
    any DB-API sqlite connection, by its `main` database)."""
    state = getattr(target, "_ursula", None)
    if state is not None:
        return str(state.file)
    if isinstance(target, (str, os.PathLike)):
        return path_text(fn, "the file", target)
    if callable(getattr(target, "execute", None)):
        for _, name, file in target.execute("PRAGMA database_list").fetchall():  # type: ignore[attr-defined]
            if name == "main" and file:
                return str(file)
    raise setup_error(fn, "invalid_argument", f"give a path or a connection, not {type(target).__name__}")


def status(target: PathLike | Any) -> dict[str, Any]:
    """The health and offsets of an attached file (`ursula_status`), as a dict."""
    return status_of(file_of("status", target))


def drain_stats(target: PathLike | Any) -> dict[str, Any]:
    """Drains the measurements the extension kept for the file since the last drain (`ursula_stats`)."""
    result: dict[str, Any] = json.loads(call("SELECT ursula_stats(?)", file_of("drain_stats", target)))
    return result


def set_token(token: str | None) -> None:
    """Sets the process-wide bearer token; None (or "") returns to URSULA_VFS_TOKEN_FILE."""
    if token is not None and not isinstance(token, str):
        raise setup_error("set_token", "invalid_argument", "the token must be a str or None")
    call("SELECT ursula_set_token(?)", token)


def commits(url: str, *, from_: str | None = None, limit: int | None = None) -> dict[str, Any]:
    """The commit points of the stream at `url` an `at` open can rebuild, oldest first: those
    after `from_` (default: all), at most `limit` (default 1000): `ursula_commits`."""
    if not isinstance(url, str):
        raise setup_error("commits", "invalid_url", "the stream URL must be a str")
    if from_ is not None:
        check_offset("commits", "from_", from_)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 0xFFFFFFFF):
        raise setup_error("commits", "invalid_argument", "limit must be a positive int")
    out: dict[str, Any] = json.loads(str(call("SELECT ursula_commits(?, ?, ?)", url, from_, limit)))
    return out
