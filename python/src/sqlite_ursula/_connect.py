"""connect(): attach a file named after the stream URL (or at `path`) and open it."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from ._api import PathLike, attach, attach_mode, path_text
from ._classify import State, connection_class
from ._driver import load
from ._errors import UrsulaError, setup_error
from ._naming import InvalidUrl, default_dir, file_name_for, normalize_stream_url

# Read-only connects without `path` use the first free of `-ro1` to `-ro8`.
READERS = 8

OWN_OPTIONS = ("path", "dir", "read_only", "follow", "at", "driver")
# The keyword arguments of sqlite3.connect (and pysqlite3's) that pass through. A misspelt
# name (`readonly`) must not pass silently: it would open the file writable and claim the
# stream, fencing its owner.
SQLITE_OPTIONS = (
    "timeout",
    "detect_types",
    "isolation_level",
    "check_same_thread",
    "factory",
    "cached_statements",
    "autocommit",
)
# Names connect decides itself.
REFUSED_OPTIONS = {
    "uri": "connect opens the attached file by URI itself (mode=ro when read_only)",
    "database": "the file is the stream's (path=..., or dir=... for the directory)",
}


def _squash(name: str) -> str:
    return name.replace("_", "").lower()


def _check_option_names(kwargs: dict[str, Any]) -> None:
    known = OWN_OPTIONS + SQLITE_OPTIONS
    for key in kwargs:
        if key in SQLITE_OPTIONS:
            continue
        if key in REFUSED_OPTIONS:
            raise setup_error(
                "connect", "invalid_argument", f"option {key!r} is not taken: {REFUSED_OPTIONS[key]}"
            )
        near = next((k for k in known if _squash(k) == _squash(key)), None)
        hint = f" (did you mean {near}?)" if near else ""
        raise setup_error(
            "connect",
            "invalid_argument",
            f"unknown option {key!r}{hint}: connect takes {', '.join(OWN_OPTIONS)} and sqlite3.connect's "
            f"options ({', '.join(SQLITE_OPTIONS)})",
        )


def connect(
    url: str,
    *,
    path: PathLike | None = None,
    dir: PathLike | None = None,
    read_only: bool = False,
    follow: bool = False,
    at: str | None = None,
    driver: str | None = None,
    **sqlite_kwargs: Any,
) -> Any:
    """Opens the database the stream at `url` replicates, as a DB-API connection of the driver.

    The file is `path`, else `<label>-<hash>.db` (a reader: `-ro<n>`) in `dir` or the default
    cache directory. `follow=True` (with `read_only=True`) makes a live read replica that keeps
    applying the owner's commits; `at="<offset>"` (with `read_only=True`) opens the database as
    it was after the last commit at or before that offset (see `commits`). `driver` forces `sqlite3` or `pysqlite3` (default: sqlite3 when it can host
    the extension). Other keyword arguments go to the driver's `connect`, checked before
    anything is attached.
    """
    _check_option_names(sqlite_kwargs)
    attach_mode("connect", read_only, follow, at)
    file = None if path is None else path_text("connect", "path", path)
    where = None if dir is None else path_text("connect", "dir", dir)
    try:
        normal = normalize_stream_url(url)
    except InvalidUrl as e:
        raise setup_error("connect", "invalid_url", str(e)) from None
    if file is not None and (file in ("", ":memory:") or file.startswith("file:")):
        raise setup_error(
            "connect",
            "invalid_argument",
            f"{file!r} is not a plain file path: SQLite would not open the attached file (give a file path)",
        )
    loaded = load(driver)
    factory = sqlite_kwargs.pop("factory", None)
    # The driver checks its own options when it connects: do that before anything is attached.
    loaded.module.connect(":memory:", **({"factory": factory} if factory else {}), **sqlite_kwargs).close()
    cls = connection_class(loaded.module, factory)
    if file is not None:
        # With path, the URL goes to the extension as given.
        file = os.path.abspath(file)
        attach(file, url, read_only, follow, at)
    else:
        file = _attach_named(url, normal.url, where, read_only, follow, at)
    conn = loaded.module.connect(_file_uri(file, read_only), uri=True, factory=cls, **sqlite_kwargs)
    conn._ursula = State(file)
    return conn


def _attach_named(
    url: str, attach_url: str, where: str | None, read_only: bool, follow: bool, at: str | None
) -> str:
    """Attaches the file named after the stream in `where` (default: the cache directory)."""
    where = os.path.abspath(where) if where is not None else default_dir()
    if where is None:
        raise setup_error(
            "connect",
            "invalid_argument",
            "no cache directory: neither XDG_CACHE_HOME nor HOME is an absolute path and the user "
            "database names no home; give dir or path",
        )
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
    except OSError as e:
        raise setup_error("connect", "local_setup", f"cannot create the directory {where}: {e}", e) from e
    if not read_only:
        file = os.path.join(where, file_name_for(url))
        attach(file, attach_url)
        return file
    for n in range(1, READERS + 1):
        file = os.path.join(where, file_name_for(url, n))
        try:
            attach(file, attach_url, True, follow, at)
            return file
        except UrsulaError as e:
            if e.kind != "in_use":
                raise
    raise setup_error(
        "connect",
        "in_use",
        f"every read-only file of {attach_url} in {where} (-ro1 to -ro{READERS}) is held by another "
        "connection or process; a process holds every file it attached until it exits: give this "
        "reader its own dir or path",
    )


def _file_uri(file: str, read_only: bool) -> str:
    """A SQLite URI for the absolute `file`; `mode=ro` makes the connection read-only."""
    return "file:" + quote(file, safe="/") + ("?mode=ro" if read_only else "")
