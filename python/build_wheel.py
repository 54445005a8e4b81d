#!/usr/bin/env python3
"""Builds the sqlite-ursula wheel from a built `libsqlite_ursula_vfs.so`, with the stdlib only.

Why not setuptools or hatchling: the wheel holds Python files and one prebuilt shared object,
and a platform tag the backends only give through plugin code (a pure-Python package with a
binary in it). Writing the zip is short: the files, METADATA, WHEEL and RECORD (PEP 427), with
fixed timestamps so one input gives the same bytes. Nothing is downloaded to build it.

The tag is `py3-none-manylinux_2_<N>_x86_64`: any Python 3, no compiled Python code, and the
glibc the shared object needs (`objdump -T`), never below the release's floor 2.28. `--plat`
demands a tag, and fails when the library needs a newer glibc than it says (release.sh).

Usage: build_wheel.py --lib PATH [--out DIR] [--plat manylinux_2_28_x86_64]
Prints the wheel's path.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGE = "sqlite_ursula"
DIST_NAME = "sqlite-ursula"
LIBRARY = "libsqlite_ursula_vfs.so"
ENTRY_POINT = "sqlite3_sqliteursulavfs_init"
# The file names _naming.py asks the library for, through ctypes.
NAMING_SYMBOL = "sqlite_ursula_file_name"
GLIBC_FLOOR = (2, 28)
# Timestamps of every zip entry (zip cannot say 1970): the same input gives the same wheel.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)

METADATA = """\
Metadata-Version: 2.1
Name: {name}
Version: {version}
Summary: SQLite databases replicated to an Ursula stream: the sqlite-ursula-vfs extension for Python
License: Apache-2.0
Requires-Python: >=3.9
Classifier: Operating System :: POSIX :: Linux
Classifier: Programming Language :: Python :: 3
Classifier: Topic :: Database
Provides-Extra: pysqlite3
Requires-Dist: pysqlite3-binary>=0.5.4; extra == "pysqlite3"
Description-Content-Type: text/markdown

"""


def version() -> str:
    """The product version: the npm package's, so both packages of one release say the same."""
    return str(json.loads((ROOT / "js" / "package.json").read_text())["version"])


def glibc_needed(lib: Path) -> tuple[int, int] | None:
    """The highest GLIBC_x.y the library's undefined symbols need, or None when objdump is missing."""
    if shutil.which("objdump") is None:
        return None
    dump = subprocess.run(["objdump", "-T", str(lib)], check=True, capture_output=True, text=True).stdout
    found = [(int(a), int(b)) for a, b in re.findall(r"\*UND\*.*GLIBC_(\d+)\.(\d+)", dump)]
    return max(found) if found else GLIBC_FLOOR


def platform_tag(lib: Path, demanded: str | None) -> str:
    needed = glibc_needed(lib)
    if demanded is not None:
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", demanded)
        if m is None:
            sys.exit(f"build_wheel.py: --plat {demanded} is not manylinux_<major>_<minor>_x86_64")
        if needed is not None and needed > (int(m.group(1)), int(m.group(2))):
            sys.exit(f"build_wheel.py: {lib} needs GLIBC_{needed[0]}.{needed[1]}, newer than {demanded} says")
        return demanded
    if needed is None:
        print(
            "build_wheel.py: objdump is missing: tagging for the floor glibc 2.28 unchecked", file=sys.stderr
        )
        needed = GLIBC_FLOOR
    major, minor = max(needed, GLIBC_FLOOR)
    return f"manylinux_{major}_{minor}_x86_64"


def check_exports(lib: Path) -> None:
    """The SQLite entry point must be exported: SQLite derives its name from the file name."""
    if shutil.which("nm") is None:
        return
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True
    ).stdout
    for symbol in (ENTRY_POINT, NAMING_SYMBOL):
        if not re.search(rf"\b{symbol}\b", out):
            sys.exit(f"build_wheel.py: {lib} does not export {symbol}")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _add(zf: zipfile.ZipFile, name: str, data: bytes, mode: int, record: list[str]) -> None:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)
    record.append(f"{name},{_record_hash(data)},{len(data)}")


def build(lib: Path, out: Path, demanded: str | None = None) -> Path:
    if not lib.is_file():
        sys.exit(f"build_wheel.py: {lib} is missing (cargo build --profile ci -p sqlite-ursula-vfs)")
    check_exports(lib)
    tag = f"py3-none-{platform_tag(lib, demanded)}"
    v = version()
    with tempfile.TemporaryDirectory() as tmp:
        # Debug line tables only make the wheel large; the symbols stay, for backtraces.
        stripped = Path(tmp) / LIBRARY
        if (
            shutil.which("objcopy") is None
            or subprocess.run(["objcopy", "--strip-debug", str(lib), str(stripped)]).returncode != 0
        ):
            shutil.copyfile(lib, stripped)
        library = stripped.read_bytes()
    src = HERE / "src" / PACKAGE
    files = sorted(p for p in src.iterdir() if p.suffix in (".py", ".json") or p.name == "py.typed")
    info_dir = f"{PACKAGE}-{v}.dist-info"
    metadata = METADATA.format(name=DIST_NAME, version=v) + (HERE / "README.md").read_text()
    wheel = (
        f"Wheel-Version: 1.0\nGenerator: sqlite-ursula build_wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{PACKAGE}-{v}-{tag}.whl"
    record: list[str] = []
    with zipfile.ZipFile(target, "w") as zf:
        for p in files:
            _add(zf, f"{PACKAGE}/{p.name}", p.read_bytes(), 0o644, record)
        _add(zf, f"{PACKAGE}/{LIBRARY}", library, 0o755, record)
        _add(zf, f"{info_dir}/METADATA", metadata.encode(), 0o644, record)
        _add(zf, f"{info_dir}/WHEEL", wheel.encode(), 0o644, record)
        # The license text beside the metadata, where installers and auditors look for it.
        _add(zf, f"{info_dir}/LICENSE", (ROOT / "LICENSE").read_bytes(), 0o644, record)
        record.append(f"{info_dir}/RECORD,,")
        info = zipfile.ZipInfo(f"{info_dir}/RECORD", date_time=ZIP_DATE)
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, "\n".join(record) + "\n")
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description="Builds the sqlite-ursula wheel.")
    ap.add_argument("--lib", required=True, type=Path, help="the built libsqlite_ursula_vfs.so")
    ap.add_argument("--out", default=ROOT / "dist", type=Path, help="output directory (default: dist)")
    ap.add_argument("--plat", help="demand this platform tag (manylinux_2_28_x86_64)")
    args = ap.parse_args()
    print(build(args.lib.resolve(), args.out.resolve(), args.plat))


if __name__ == "__main__":
    main()
