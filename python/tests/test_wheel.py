"""The package under test is the installed wheel, and the wheel is laid out as documented."""

from __future__ import annotations

import json
import os
import re
from importlib import metadata
from pathlib import Path

import sqlite_ursula
from conftest import REPO


def test_the_package_comes_from_the_installed_wheel() -> None:
    here = Path(sqlite_ursula.__file__).resolve()
    assert "site-packages" in here.parts, here
    assert REPO / "python" / "src" not in here.parents, here


def test_the_wheel_carries_the_extension_and_the_loader_uses_it() -> None:
    lib = sqlite_ursula.bundled_library()
    assert lib.name == "libsqlite_ursula_vfs.so" and lib.is_file()
    assert lib.parent == Path(sqlite_ursula.__file__).resolve().parent
    assert os.access(lib, os.X_OK)
    # scripts/test-python.sh unsets SQLITE_URSULA_VFS: the connections of the other tests ran
    # on this very file.
    assert "SQLITE_URSULA_VFS" not in os.environ
    sqlite_ursula.load()
    from sqlite_ursula import _driver

    assert _driver._loaded is not None and _driver._loaded.library == str(lib)


def test_metadata_tag_and_version() -> None:
    dist = metadata.distribution("sqlite-ursula")
    version = json.loads((REPO / "js" / "package.json").read_text())["version"]
    assert dist.version == version
    wheel = dist.read_text("WHEEL") or ""
    assert "Root-Is-Purelib: false" in wheel
    assert re.search(r"^Tag: py3-none-manylinux_2_(\d+)_x86_64$", wheel, re.M), wheel
    meta = dist.metadata
    assert meta["Name"] == "sqlite-ursula"
    assert 'pysqlite3-binary>=0.5.4; extra == "pysqlite3"' in (meta.get_all("Requires-Dist") or [])
    files = {str(f) for f in dist.files or []}
    assert "sqlite_ursula/libsqlite_ursula_vfs.so" in files
    assert "sqlite_ursula/py.typed" in files
    assert "sqlite_ursula/_error_table.json" in files
    assert not any(f.endswith(".c") or "/tests/" in f for f in files), files
