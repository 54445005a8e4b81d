"""Local file names, `<label>-<hash>.db` and `<label>-<hash>-ro<n>.db`, and the default directory.

The names come from the extension itself (`vfs/src/naming.rs`, through the C symbol
`sqlite_ursula_file_name`): one implementation, which the npm package calls too, so one stream URL
names one file from Python and from Node.js. Calling it needs no SQLite: the library is opened
with ctypes, the same file `load` hands to the driver. The directory is read from this process's
environment and user database, checked against the same vectors as the npm package's
(`vfs/tests/naming/`).
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ._driver import bundled_library, loaded_library
from ._errors import setup_error


class InvalidUrl(ValueError):
    """The text is not a stream URL; the message says why (`invalid_url`)."""


@dataclass(frozen=True)
class StreamUrl:
    """A stream URL's normal forms.

    `identity` is what the hash reads (`scheme://host[:port]/seg/seg`, no userinfo), `url` the
    same with the userinfo kept (the spelling `connect` attaches with).
    """

    identity: str
    url: str


_library: ctypes.CDLL | None = None
_library_lock = threading.Lock()


def library_path() -> str:
    """The library `load` loads: `SQLITE_URSULA_VFS`, else the one the wheel carries."""
    return loaded_library() or os.environ.get("SQLITE_URSULA_VFS") or str(bundled_library())


def _naming_library() -> ctypes.CDLL:
    global _library
    with _library_lock:
        if _library is None:
            path = library_path()
            if not Path(path).is_file():
                raise setup_error(
                    "connect",
                    "unsupported",
                    f"no sqlite-ursula-vfs library at {path}: install the sqlite-ursula wheel for "
                    "this platform, or build the extension (cargo build --release -p "
                    "sqlite-ursula-vfs) and point SQLITE_URSULA_VFS at it",
                )
            lib = ctypes.CDLL(path)
            lib.sqlite_ursula_file_name.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
            lib.sqlite_ursula_file_name.restype = ctypes.c_void_p
            lib.sqlite_ursula_free_text.argtypes = [ctypes.c_void_p]
            lib.sqlite_ursula_free_text.restype = None
            _library = lib
        return _library


def _names(stream_url: str, read_only_index: int) -> dict[str, str]:
    if not isinstance(stream_url, str):
        raise InvalidUrl("the stream URL must be a string")
    if not 0 <= read_only_index < 2**32:
        raise ValueError(f"the reader index must be from 0 up, not {read_only_index}")
    lib = _naming_library()
    try:
        text = stream_url.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidUrl(f"{json.dumps(stream_url)} is not a URL") from None
    if b"\0" in text:
        raise InvalidUrl(f"{json.dumps(stream_url)} is not a URL")
    ptr = lib.sqlite_ursula_file_name(text, read_only_index)
    if not ptr:
        raise InvalidUrl(f"{json.dumps(stream_url)} is not a URL")
    try:
        answer = json.loads(ctypes.string_at(ptr).decode("utf-8"))
    finally:
        lib.sqlite_ursula_free_text(ptr)
    if "error" in answer:
        raise InvalidUrl(answer["error"]["message"])
    names: dict[str, str] = answer["ok"]
    return names


def normalize_stream_url(stream_url: str) -> StreamUrl:
    """Parses a stream URL into its normal forms, or raises InvalidUrl."""
    n = _names(stream_url, 0)
    return StreamUrl(identity=n["identity"], url=n["url"])


def file_name_for(stream_url: str, read_only_index: int = 0) -> str:
    """`<label>-<hash>.db`, or `<label>-<hash>-ro<n>.db` for a reader."""
    return _names(stream_url, read_only_index)["file"]


def default_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> str | None:
    """`sqlite-ursula` in `$XDG_CACHE_HOME` when absolute, else in `~/Library/Caches` (macOS) or
    `~/.cache`, where `~` is `$HOME` when absolute, else the user database's home; None when
    there is neither."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    xdg = env.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "sqlite-ursula")
    home = env.get("HOME")
    if not home or not os.path.isabs(home):
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except (KeyError, OSError):
            home = None
    if not home or not os.path.isabs(home):
        return None
    cache = os.path.join(home, "Library", "Caches") if platform == "darwin" else os.path.join(home, ".cache")
    return os.path.join(cache, "sqlite-ursula")
