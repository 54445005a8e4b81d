"""SQLite databases replicated to an Ursula stream, for Python.

`connect(url)` loads the `sqlite-ursula-vfs` extension the wheel carries into the stdlib
`sqlite3` (when its SQLite is 3.45.3 or later and it loads extensions) or into pysqlite3,
attaches a local file to the stream, and returns a DB-API connection to it whose failures raise
the Ursula errors below. See docs/python-package.md.
"""

from __future__ import annotations

from types import ModuleType

from ._api import attach, commits, drain_stats, set_token, status
from ._connect import connect
from ._driver import MIN_SQLITE, bundled_library
from ._driver import load as _load
from ._errors import (
    UrsulaError,
    UrsulaFencedError,
    UrsulaPaymentRequiredError,
    UrsulaReattachError,
    UrsulaReplicationError,
    UrsulaSetupError,
    UrsulaWriteRefusedError,
)
from ._naming import default_dir, file_name_for


def load(driver: str | None = None) -> ModuleType:
    """Loads the extension (once per process) and returns the DB-API module it lives in:
    `sqlite3` or `pysqlite3.dbapi2`. `driver` forces one; a later call naming another raises."""
    return _load(driver).module


__all__ = [
    "MIN_SQLITE",
    "UrsulaError",
    "UrsulaFencedError",
    "UrsulaPaymentRequiredError",
    "UrsulaReattachError",
    "UrsulaReplicationError",
    "UrsulaSetupError",
    "UrsulaWriteRefusedError",
    "attach",
    "bundled_library",
    "commits",
    "connect",
    "default_dir",
    "drain_stats",
    "file_name_for",
    "load",
    "set_token",
    "status",
]
