"""python/build_wheel.py on small shared objects made here: the platform tag follows the glibc
the library needs, `--plat` refuses a library that needs more (scripts/release.sh demands
manylinux_2_28), the entry point is required, and one input gives the same bytes."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import shutil
import subprocess
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from conftest import REPO

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("objdump")), reason="no gcc/objdump"
)


def builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_wheel", REPO / "python" / "build_wheel.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shared_object(where: Path, body: str, *libs: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    src = where / "x.c"
    src.write_text(body)
    lib = where / "libsqlite_ursula_vfs.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src), *libs], check=True)
    return lib


# The stand-ins export what build_wheel.py checks for: the entry point and the naming function.
NAMING = "char *sqlite_ursula_file_name(const char *u, unsigned n) { (void)u; (void)n; return 0; }\n"
OLD_GLIBC = (
    "#include <stdlib.h>\nint sqlite3_sqliteursulavfs_init(void) { free(malloc(1)); return 0; }\n"
    + NAMING
)
# pthread_create moved into libc with glibc 2.34: a library built here against it needs 2.34.
NEW_GLIBC = (
    "#include <pthread.h>\nstatic void *run(void *a) { return a; }\n"
    "int sqlite3_sqliteursulavfs_init(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }\n"
    + NAMING
)


def test_the_tag_follows_the_glibc_the_library_needs(tmp_path: Path) -> None:
    bw = builder()
    old = shared_object(tmp_path / "old", OLD_GLIBC)
    assert bw.platform_tag(old, None) == "manylinux_2_28_x86_64"
    assert bw.platform_tag(old, "manylinux_2_28_x86_64") == "manylinux_2_28_x86_64"
    new = shared_object(tmp_path / "new", NEW_GLIBC, "-lpthread")
    needed = bw.glibc_needed(new)
    if needed <= (2, 28):
        pytest.skip(f"this host's pthread_create needs only GLIBC_{needed[0]}.{needed[1]}")
    assert bw.platform_tag(new, None) == f"manylinux_{needed[0]}_{needed[1]}_x86_64"
    with pytest.raises(SystemExit, match="newer than manylinux_2_28_x86_64"):
        bw.platform_tag(new, "manylinux_2_28_x86_64")


def test_the_entry_point_is_required(tmp_path: Path) -> None:
    lib = shared_object(tmp_path, "int something_else(void) { return 0; }\n")
    with pytest.raises(SystemExit, match="does not export sqlite3_sqliteursulavfs_init"):
        builder().build(lib, tmp_path / "out")


def test_one_input_gives_the_same_wheel_and_its_record_holds(tmp_path: Path) -> None:
    bw = builder()
    lib = shared_object(tmp_path / "lib", OLD_GLIBC)
    one, two = bw.build(lib, tmp_path / "one"), bw.build(lib, tmp_path / "two")
    assert one.name == two.name and one.read_bytes() == two.read_bytes()
    assert one.name.endswith("-py3-none-manylinux_2_28_x86_64.whl")
    with zipfile.ZipFile(one) as zf:
        record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = [line.split(",") for line in zf.read(record).decode().splitlines()]
        assert {r[0] for r in rows} == set(zf.namelist())
        for name, digest, size in rows:
            if name == record:
                assert digest == size == ""
                continue
            data = zf.read(name)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (want, len(data)), name
        assert zf.getinfo("sqlite_ursula/libsqlite_ursula_vfs.so").external_attr >> 16 & 0o777 == 0o755
        license_file = next(n for n in zf.namelist() if n.endswith(".dist-info/LICENSE"))
        assert zf.read(license_file) == (REPO / "LICENSE").read_bytes()
