"""Choosing the DB-API module, loading the extension into it, and the control connection.

The extension is loaded once per process, into one SQLite library: the stdlib `sqlite3`'s or
pysqlite3's (which bundles its own). Loading it registers the `ursula` VFS as that library's
default and the SQL functions (`ursula_attach`, `ursula_status`, `ursula_stats`,
`ursula_set_token`) on the loading connection, an in-memory one kept for the process (the
control connection, as in the npm package). The extension's state (the attached files, the
token) lives in the shared object, so a second SQLite library in the same process must not load
it: the first driver chosen is the process's driver.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ._errors import function_error, is_function_failure, setup_error

# The extension's bindings need this SQLite or later (docs/sqlite-vfs.md, "Loading"); the
# package never loads it into an older one, whose version check would only refuse it.
MIN_SQLITE = (3, 45, 3)
MIN_SQLITE_TEXT = ".".join(map(str, MIN_SQLITE))
DRIVERS = ("sqlite3", "pysqlite3")
LIBRARY_NAME = "libsqlite_ursula_vfs.so"


def bundled_library() -> Path:
    """The extension the wheel carries, beside this module."""
    return Path(__file__).resolve().parent / LIBRARY_NAME


def _import(name: str) -> ModuleType:
    # pysqlite3's DB-API module is pysqlite3.dbapi2, the counterpart of sqlite3 (sqlite3.dbapi2).
    return importlib.import_module("sqlite3" if name == "sqlite3" else "pysqlite3.dbapi2")


def _verdict(name: str) -> tuple[ModuleType | None, str]:
    """The module when it can host the extension, else None; and a sentence for the error."""
    try:
        mod = _import(name)
    except ImportError as e:
        return None, f"{name} is not installed ({e})"
    version = getattr(mod, "sqlite_version", "unknown")
    can_load = hasattr(mod.Connection, "enable_load_extension")
    new_enough = tuple(getattr(mod, "sqlite_version_info", (0,))) >= MIN_SQLITE
    if new_enough and can_load:
        return mod, f"{name} has SQLite {version} and loads extensions"
    problems = []
    if not new_enough:
        problems.append(f"is older than {MIN_SQLITE_TEXT}")
    if not can_load:
        problems.append("cannot load extensions (built without loadable extension support)")
    return None, f"{name} has SQLite {version}, which " + " and ".join(problems)


def choose(driver: str | None = None) -> tuple[str, ModuleType]:
    """The driver to load the extension into: `driver` when given, else `sqlite3` when it can
    host the extension, else `pysqlite3`. Raises UrsulaSetupError (unsupported) naming what was
    found and what to install."""
    found: list[str] = []
    for name in DRIVERS if driver is None else (driver,):
        mod, why = _verdict(name)
        if mod is not None:
            return name, mod
        found.append(why)
    wanted = f"a SQLite {MIN_SQLITE_TEXT} or later that loads extensions"
    fix = (
        "install pysqlite3-binary (pip install 'sqlite-ursula[pysqlite3]'), or use a Python whose "
        f"sqlite3 module is built with --enable-loadable-sqlite-extensions against SQLite {MIN_SQLITE_TEXT}+"
    )
    if driver == "sqlite3":
        fix = f"let the package choose (driver=None), or {fix}"
    raise setup_error(
        "connect", "unsupported", f"sqlite_ursula needs {wanted}: {'; '.join(found)}. Fix: {fix}"
    )


@dataclass
class Loaded:
    """The process's driver and its control connection (used under `lock`)."""

    name: str
    module: ModuleType
    control: Any
    library: str
    lock: threading.Lock


_loaded: Loaded | None = None
_load_lock = threading.Lock()


def load(driver: str | None = None, library: str | None = None) -> Loaded:
    """Loads the extension once per process. `library` (default: `SQLITE_URSULA_VFS`, else the
    one the wheel carries) names the shared object; later calls return the same, and refuse
    a driver other than the loaded one."""
    global _loaded
    if driver is not None and driver not in DRIVERS:
        raise setup_error(
            "connect", "invalid_argument", f"driver must be one of {', '.join(DRIVERS)}, not {driver!r}"
        )
    with _load_lock:
        if _loaded is not None:
            if driver is not None and driver != _loaded.name:
                raise setup_error(
                    "connect",
                    "invalid_argument",
                    f"the extension is loaded into {_loaded.name} in this process already; one process "
                    f"uses one driver (asked for {driver})",
                )
            return _loaded
        name, mod = choose(driver)
        path = library or os.environ.get("SQLITE_URSULA_VFS") or str(bundled_library())
        if not Path(path).is_file():
            raise setup_error(
                "load",
                "unsupported",
                f"no sqlite-ursula-vfs library at {path}: install the sqlite-ursula wheel for this "
                "platform, or build the extension (cargo build --release -p sqlite-ursula-vfs) and "
                "point SQLITE_URSULA_VFS at it",
            )
        # check_same_thread=False: any thread may attach or read a status; `lock` serialises
        # them, as Python's sqlite3 asks of a connection shared between threads.
        control = mod.connect(":memory:", check_same_thread=False)
        try:
            control.enable_load_extension(True)
            control.load_extension(path)
            control.enable_load_extension(False)
        except Exception as e:
            control.close()
            raise setup_error(
                "load", "local_setup", f"cannot load the extension {path} into {name}: {e}", e
            ) from e
        _loaded = Loaded(name=name, module=mod, control=control, library=path, lock=threading.Lock())
        return _loaded


def loaded_library() -> str | None:
    """The library this process loaded, or None before the first `load`."""
    return None if _loaded is None else _loaded.library


def call(sql: str, *args: Any) -> Any:
    """One SQL function of the extension on the control connection, its failure classified."""
    loaded = load()
    with loaded.lock:
        try:
            return loaded.control.execute(sql, args).fetchone()[0]
        except loaded.module.Error as e:
            if is_function_failure(str(e)):
                raise function_error(str(e), e) from e
            raise


def status_of(file: str) -> dict[str, Any]:
    """`ursula_status(file)` as a dict."""
    result: dict[str, Any] = json.loads(call("SELECT ursula_status(?)", file))
    return result
