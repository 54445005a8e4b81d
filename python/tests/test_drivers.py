"""Which DB-API module hosts the extension, and the refusal when none can.

The stdlib path runs for real when scripts/test-python.sh provides a SQLite 3.45.3+ library
(SQLITE_URSULA_TEST_LIBSQLITE3_DIR) for a Python whose sqlite3 loads extensions (Debian's
/usr/bin/python3; SQLITE_URSULA_TEST_STDLIB_PYTHON): that Python's sqlite3 module links
libsqlite3.so.0 dynamically, so LD_LIBRARY_PATH gives it the newer SQLite.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

import sqlite_ursula as su
from conftest import REPORT_ERROR, run_python

STDLIB_CAN_HOST = sqlite3.sqlite_version_info >= su.MIN_SQLITE and hasattr(
    sqlite3.Connection, "enable_load_extension"
)


def test_the_automatic_choice() -> None:
    mod = su.load()
    assert mod.__name__ == ("sqlite3" if STDLIB_CAN_HOST else "pysqlite3.dbapi2")
    assert mod.sqlite_version_info >= su.MIN_SQLITE


def test_one_driver_per_process() -> None:
    other = "pysqlite3" if su.load().__name__ == "sqlite3" else "sqlite3"
    with pytest.raises(su.UrsulaSetupError, match="loaded into .* already; one process uses one driver") as e:
        su.load(other)
    assert e.value.kind == "invalid_argument"
    with pytest.raises(su.UrsulaSetupError, match="driver must be one of sqlite3, pysqlite3"):
        su.connect("http://127.0.0.1:1/a/b", driver="apsw")


@pytest.mark.skipif(STDLIB_CAN_HOST, reason="this Python's sqlite3 can host the extension")
def test_forcing_a_stdlib_that_cannot_host_it_is_refused_clearly(url: str, tmp_path: Path) -> None:
    code = f"""
import json, sqlite_ursula as su
{REPORT_ERROR}
try:
    su.connect({url!r}, dir={str(tmp_path)!r}, driver="sqlite3")
except su.UrsulaError as e:
    report(e)
"""
    got = run_python(code)
    assert (got["class"], got["kind"], got["action"]) == ("UrsulaSetupError", "unsupported", "fix")
    assert f"sqlite3 has SQLite {sqlite3.sqlite_version}" in got["message"]
    assert "pip install" in got["message"] and "pysqlite3-binary" in got["message"]
    assert list(tmp_path.iterdir()) == []


def test_neither_driver_is_refused_naming_both(url: str, tmp_path: Path) -> None:
    # pysqlite3 hidden: an import of it fails as when it is not installed.
    code = f"""
import json, sys
sys.modules["pysqlite3"] = None
sys.modules["pysqlite3.dbapi2"] = None
import sqlite3, sqlite_ursula as su
{REPORT_ERROR}
can = sqlite3.sqlite_version_info >= su.MIN_SQLITE and hasattr(sqlite3.Connection, "enable_load_extension")
try:
    su.connect({url!r}, dir={str(tmp_path)!r})
    print(json.dumps({{"connected": can}}))
except su.UrsulaError as e:
    report(e)
"""
    got = run_python(code)
    if STDLIB_CAN_HOST:
        assert got == {"connected": True}
        return
    assert (got["class"], got["kind"]) == ("UrsulaSetupError", "unsupported")
    assert f"sqlite3 has SQLite {sqlite3.sqlite_version}" in got["message"]
    assert "pysqlite3 is not installed" in got["message"]


def stdlib_python() -> str:
    python = os.environ.get("SQLITE_URSULA_TEST_STDLIB_PYTHON", "/usr/bin/python3")
    if not os.access(python, os.X_OK):
        pytest.skip(f"no {python}")
    return python


def child_env(tmp_path: Path, libdir: str | None) -> dict[str, str]:
    """The installed package alone on PYTHONPATH (no pysqlite3), and maybe a newer libsqlite3."""
    pkg = tmp_path / "pkg"
    if not pkg.exists():
        pkg.mkdir()
        (pkg / "sqlite_ursula").symlink_to(Path(su.__file__).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(pkg)
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir
    return env


def test_an_old_sqlite3_that_loads_extensions_is_refused(url: str, tmp_path: Path) -> None:
    python = stdlib_python()
    probe = subprocess.run(
        [python, "-c", "import sqlite3; print(sqlite3.sqlite_version_info >= (3, 45, 3))"],
        capture_output=True,
        text=True,
        env=child_env(tmp_path, None),
    )
    if probe.stdout.strip() != "False":
        pytest.skip(f"{python}'s sqlite3 is not older than 3.45.3")
    code = f"""
import json, sqlite_ursula as su
{REPORT_ERROR}
try:
    su.connect({url!r}, dir={str(tmp_path / "db")!r})
except su.UrsulaError as e:
    report(e)
"""
    got = run_python(code, python=python, env=child_env(tmp_path, None))
    assert (got["class"], got["kind"]) == ("UrsulaSetupError", "unsupported")
    assert "which is older than 3.45.3" in got["message"] and "pysqlite3 is not installed" in got["message"]


STDLIB_SCENARIO = """
import json, subprocess, sys, sqlite_ursula as su
url, here, there = sys.argv[1:4]
db = su.connect(url, dir=here)
mod = su.load()
db.execute("CREATE TABLE t(x)")
db.execute("INSERT INTO t VALUES (1)")
db.commit()
owner = "import sqlite_ursula as su, sys; su.connect(sys.argv[1], dir=sys.argv[2]).execute('SELECT 1')"
subprocess.run([sys.executable, "-c", owner, url, there], check=True)
db.execute("INSERT INTO t VALUES (2)")
out = {"driver": mod.__name__, "version": mod.sqlite_version}
try:
    db.commit()
except su.UrsulaError as e:
    out["commit"] = [type(e).__name__, e.kind, e.sqlite_errorcode]
try:
    db.execute("SELECT * FROM t").fetchall()
except su.UrsulaError as e:
    out["read"] = [type(e).__name__, e.kind, e.sqlite_errorcode, str(e).split(":")[0]]
print(json.dumps(out))
"""


def test_the_stdlib_sqlite3_hosts_the_extension_for_real(url: str, tmp_path: Path) -> None:
    python = stdlib_python()
    libdir = os.environ.get("SQLITE_URSULA_TEST_LIBSQLITE3_DIR")
    if not libdir:
        pytest.skip("SQLITE_URSULA_TEST_LIBSQLITE3_DIR is not set (scripts/test-python.sh builds one)")
    env = child_env(tmp_path, libdir)
    out = subprocess.run(
        [python, "-c", STDLIB_SCENARIO, url, str(tmp_path / "here"), str(tmp_path / "there")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["driver"] == "sqlite3"
    # Python 3.11's sqlite3 reports extended result codes: 778 for the fenced commit, 266 for the read.
    assert got["commit"] == ["UrsulaFencedError", "fenced", 778]
    assert got["read"] == ["UrsulaFencedError", "fenced", 266, "read refused, the file is fenced"]
