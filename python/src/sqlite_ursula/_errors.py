"""The Ursula errors, and the mapping from the extension's failures to them.

The kinds, their actions and classes, and the sentences come from the extension's table
(`vfs/src/package_errors.rs`, generated into `_error_table.json`; a Rust test fails when this copy
drifts), the table the npm package reads too. Three sources feed the mapping:

- a failed SQL function (`ursula_attach: <kind>: ...`, `ursula_status: attach_failed: <kind>:
  ...`): the kind is in the message;
- a failed statement on a connected file: the driver's error (an I/O error: 7178, 778 or 266)
  read together with `status(file)["error"]`;
- a statement the extension refused while SQLite prepared it (`PRAGMA journal_mode=DELETE`):
  SQLITE_ERROR with the message `sqlite-ursula-vfs: <kind>: ...`; it changed nothing, so no
  status records it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

_TABLE: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent / "_error_table.json").read_text(encoding="utf-8")
)
_KIND: dict[str, dict[str, str]] = _TABLE["kinds"]
REFUSED_BY: dict[str, str] = _TABLE["refused_by"]


def _say(name: str, reason: Any = None) -> str:
    """A sentence of the table, `{reason}` filled in and `{reopen}` said as this package says it."""
    text: str = _TABLE["messages"][name]
    return text.replace("{reopen}", "connect again").replace("{reason}", str(reason))


# SQLite's result codes the extension fails calls with.
SQLITE_ERROR = 1
SQLITE_IOERR = 10
SQLITE_AUTH = 23
SQLITE_IOERR_READ = 266
SQLITE_IOERR_WRITE = 778
SQLITE_IOERR_AUTH = 7178


class UrsulaError(Exception):
    """Base of every error the package raises for the extension or its own checks.

    `kind` is the extension's kind (or the refused commit's `refused_kind`), `action` what to do
    (`retry`, `reattach`, `stop`, `fix`), `reason` the extension's words without the function
    prefix, `fenced` true only for a fence. When the cause is a SQLite error its
    `sqlite_errorcode` and `sqlite_errorname` are copied here.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        action: str,
        reason: str | None = None,
        fenced: bool = False,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.action = action
        self.reason = reason
        self.fenced = fenced
        # For kind `retained` (an `at` below what the stream can rebuild): the earliest offset
        # an at-open can use instead.
        self.earliest: str | None = None
        self.sqlite_errorcode: int | None = getattr(cause, "sqlite_errorcode", None)
        self.sqlite_errorname: str | None = getattr(cause, "sqlite_errorname", None)
        if cause is not None:
            # Shown as "The above exception was the direct cause", like `raise ... from cause`.
            self.__cause__ = cause

    def __str__(self) -> str:
        return self.message


class UrsulaWriteRefusedError(UrsulaError):
    """A commit or attach refused before it reached the stream: nothing of it was applied."""


class UrsulaPaymentRequiredError(UrsulaWriteRefusedError):
    """A write refused with 402 Payment Required by a layer in front of the stream."""


class UrsulaReplicationError(UrsulaError):
    """A commit the stream did not take: the file is poisoned until it is attached again."""


class UrsulaReattachError(UrsulaReplicationError):
    """Poisoned with an unknown outcome or a damaged local file: close and connect again."""


class UrsulaFencedError(UrsulaReplicationError):
    """Another owner took the stream over: stop using the database."""


class UrsulaSetupError(UrsulaError):
    """The request cannot succeed as made: change the URL, the options or the files."""


_CLASSES: dict[str, type[UrsulaError]] = {
    "write_refused": UrsulaWriteRefusedError,
    "payment_required": UrsulaPaymentRequiredError,
    "reattach": UrsulaReattachError,
    "fenced": UrsulaFencedError,
    "setup": UrsulaSetupError,
}


def attach_error(
    message: str, kind: str, cause: BaseException | None = None, *, payment_code: bool = True
) -> UrsulaError:
    """The error of a failed attach, by the extension's kind.

    Only attach itself sees a 402's own code (SQLITE_AUTH): that makes it a payment error;
    elsewhere a 402 shows as `refused`.
    """
    entry = _KIND.get(kind, {"action": "fix", "error": "setup"})
    action = entry["action"]
    if entry["error"] == "payment_required":
        code = getattr(cause, "sqlite_errorcode", None)
        if payment_code and code == SQLITE_AUTH:
            return UrsulaPaymentRequiredError(message, kind=kind, action=action, reason=message, cause=cause)
        return UrsulaWriteRefusedError(message, kind="refused", action=action, reason=message, cause=cause)
    cls = _CLASSES[entry["error"]]
    e = cls(message, kind=kind, action=action, reason=message, fenced=action == "stop", cause=cause)
    if kind == "retained":
        # An `at` below what the stream can rebuild: the offset to open at instead.
        m = _EARLIEST.search(message)
        e.earliest = m.group(1) if m else None
    return e


# How the extension names the earliest point a `retained` refusal could open at.
_EARLIEST = re.compile(r"the earliest reachable point is (-1|\d{20})")


def setup_error(fn: str, kind: str, message: str, cause: BaseException | None = None) -> UrsulaSetupError:
    """An error the package finds itself, before anything is attached: `<fn>: <kind>: ...`."""
    return UrsulaSetupError(f"{fn}: {kind}: {message}", kind=kind, action="fix", reason=message, cause=cause)


_KIND_IN_MESSAGE = re.compile(r"^ursula_\w+: (\w+): (?:(\w+): )?")
_REFUSED_STATEMENT = re.compile(r"^sqlite-ursula-vfs: (\w+): ")


def is_function_failure(message: str) -> bool:
    """A failure of one of the extension's SQL functions (its message names the function)."""
    return re.match(r"^ursula_\w+: ", message) is not None


def function_error(message: str, cause: BaseException | None = None) -> UrsulaError:
    """The error of a failed `ursula_attach` / `ursula_status` / `ursula_stats`.

    The kind is in the message; `status` of a path whose attach failed names that attach's
    kind (`attach_failed: <kind>`).
    """
    m = _KIND_IN_MESSAGE.match(message)
    kind = m.group(1) if m else "internal"
    if kind == "attach_failed":
        kind = (m.group(2) if m else None) or "internal"
    if kind == "not_loaded":
        kind = "not_attached"
    e = attach_error(message, kind, cause, payment_code=message.startswith("ursula_attach:"))
    if m:
        e.reason = message[m.end() :]
    return e


Status = Mapping[str, Any]


def classify_statement_error(
    error: BaseException, read_status: Callable[[str], Status], file: str, op: str
) -> BaseException:
    """Classifies an error the driver raised on the connection to `file`, or returns it unchanged.

    `op` is `read` or `write`, what the failed call did as far as the caller knows. It matters
    only when the driver reports SQLite's primary code (pysqlite3 says 10, SQLITE_IOERR, where
    Python 3.11's sqlite3 says 266 or 778): then a read's I/O error counts as 266.
    """
    code = getattr(error, "sqlite_errorcode", None)
    if not isinstance(code, int):
        return error
    message = str(error)
    if code == SQLITE_ERROR:
        m = _REFUSED_STATEMENT.match(message)
        if m is None:
            return error
        return UrsulaSetupError(
            message, kind=m.group(1), action="fix", reason=message[m.end() :], cause=error
        )
    if code not in (SQLITE_IOERR_AUTH, SQLITE_IOERR_WRITE, SQLITE_IOERR_READ, SQLITE_IOERR):
        return error
    is_read = code == SQLITE_IOERR_READ or (code == SQLITE_IOERR and op == "read")
    try:
        s = read_status(file)
    except Exception:
        return error
    failure = s.get("error")
    if not failure:
        return error
    if not s.get("poisoned") and failure.get("kind") == "unsupported":
        # A setup the extension does not support (locking_mode=EXCLUSIVE, a page size change):
        # nothing reached the stream and the file is not poisoned, but running it again fails
        # the same way until the setup changes.
        if is_read:
            return error
        reason = failure.get("message")
        return UrsulaReplicationError(_say("unsupported", reason), kind="unsupported", action="fix", reason=reason, cause=error)
    if failure.get("kind") == "refused":
        if is_read:
            return error
        return _refused(s, failure, error)
    # Poisoned: every later commit fails until the file is attached again.
    reason = s.get("reason") or failure.get("message")
    kind = failure.get("kind") or "internal"
    fenced = s.get("fenced") is True
    if failure.get("action") == "stop":
        head = _say("fenced_read" if is_read else "not_replicated")
        return UrsulaFencedError(
            f"{head}: {reason}. {_say('stop_tail')}",
            kind=kind,
            action="stop",
            reason=reason,
            fenced=True,
            cause=error,
        )
    if is_read and s.get("read_only") and s.get("following") is False and failure.get("action") == "reattach":
        # A live read replica whose stream was deleted, recreated or trimmed past it.
        text = f"{_say('stopped_following')}: {reason}. {_say('reattach_tail')}"
        return UrsulaReattachError(text, kind=kind, action="reattach", reason=reason, cause=error)
    if is_read:
        return error
    if failure.get("action") == "reattach":
        text = f"{_say('not_replicated')}: {reason}. {_say('reattach_tail')}"
        return UrsulaReattachError(
            text, kind=kind, action="reattach", reason=reason, fenced=fenced, cause=error
        )
    text = f"{_say('not_replicated')}: {reason}. {_say('fix_tail')}"
    return UrsulaReplicationError(text, kind=kind, action="fix", reason=reason, fenced=fenced, cause=error)


def _refused(s: Status, failure: Mapping[str, Any], error: BaseException) -> UrsulaError:
    """A commit refused before it reached the stream, by `refused_kind`."""
    kind = failure.get("refused_kind") or s.get("refused_kind") or "refused"
    reason = s.get("refused_reason") or failure.get("message")
    if kind == "payment_required":
        m = f"{REFUSED_BY[kind]}: {reason}. {_say('retry_tail')}"
        return UrsulaPaymentRequiredError(m, kind=kind, action="retry", reason=reason, cause=error)
    if kind == "too_large":
        return UrsulaWriteRefusedError(_say("too_large", reason), kind=kind, action="fix", reason=reason, cause=error)
    if _KIND.get(kind, {}).get("action") == "retry":
        m = f"{REFUSED_BY[kind]}: {reason}. {_say('retry_tail')}"
        return UrsulaWriteRefusedError(m, kind=kind, action="retry", reason=reason, cause=error)
    return UrsulaReplicationError(_say("refused_setup", reason), kind=kind, action="fix", reason=reason, cause=error)
