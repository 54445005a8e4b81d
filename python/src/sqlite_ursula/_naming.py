"""Local file names, `<label>-<hash>.db` and `<label>-<hash>-ro<n>.db`, and the default directory.

A port of the npm package's `js/src/naming.js`, which reads the URL with the WHATWG URL parser
(Node.js `new URL`). The parts of that parser an http(s) URL can reach are ported here, so one
stream URL names the same file from Python and from Node.js (`tests/test_naming.py` checks
vectors against the JavaScript code). One difference: a host with non-ASCII characters is refused
(write it in its `xn--` form), since Python's IDNA codec (IDNA 2003) and WHATWG's UTS #46 map a
few characters differently, and a different mapping would silently name another file.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import pwd
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset(b"0123456789ABCDEFabcdef")
_DEFAULT_PORT = {"http": 80, "https": 443}
# WHATWG's forbidden domain code points: checked after percent-decoding, so `%` is among them.
_FORBIDDEN_HOST = frozenset(" #%/:<>?@[\\]^|") | {chr(c) for c in range(0x20)} | {"\x7f"}
# WHATWG's userinfo percent-encode set, beyond C0 controls and non-ASCII.
_USERINFO_ENCODE = frozenset(' "#<>?`{}/:;=@[\\]^|')


class InvalidUrl(ValueError):
    """The text is not a stream URL; the message says why (`invalid_url`)."""


@dataclass(frozen=True)
class StreamUrl:
    """A stream URL's normal form.

    `identity` is what the hash reads (`scheme://host[:port]/seg/seg`, no userinfo), `url` the
    same with the userinfo kept (the spelling `connect` attaches with), `segments` the decoded
    path segments, for the label.
    """

    identity: str
    url: str
    segments: list[bytes]


def _decode_segment(segment: str) -> bytes:
    """Percent-decodes to bytes; a `%` not followed by two hex digits stays as it is."""
    raw = segment.encode("utf-8", "surrogatepass")
    out = bytearray()
    i = 0
    while i < len(raw):
        b = raw[i]
        if b == 0x25 and i + 2 < len(raw) and raw[i + 1] in _HEX and raw[i + 2] in _HEX:
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(b)
            i += 1
    return bytes(out)


def _encode_segment(data: bytes) -> str:
    """The one fixed encoding: every byte outside RFC 3986's unreserved set as upper-case `%XX`."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in data)


def _encode_userinfo(text: str) -> str:
    """WHATWG's userinfo encoding: existing `%XX` stay, the userinfo set is encoded."""
    out = []
    for ch in text:
        if ord(ch) < 0x21 or ord(ch) > 0x7E or ch in _USERINFO_ENCODE:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out)


def _ipv4_number(part: str) -> int | None:
    """A WHATWG IPv4 number (decimal, `0x` hex, or octal with a leading 0), or None."""
    base, digits = 10, part
    if part[:2].lower() == "0x":
        base, digits = 16, part[2:]
    elif len(part) > 1 and part[0] == "0":
        base, digits = 8, part[1:]
    if digits == "":
        return 0
    allowed = {10: "0123456789", 16: "0123456789abcdefABCDEF", 8: "01234567"}[base]
    if any(c not in allowed for c in digits):
        return None
    return int(digits, base)


def _ipv4(host: str) -> str | None:
    """The dotted form of a host WHATWG parses as IPv4 (its last label is a number), else None."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    last = parts[-1]
    if not (last and (all(c.isdigit() and c.isascii() for c in last) or _ipv4_number(last) is not None)):
        return None
    if len(parts) > 4:
        raise InvalidUrl("an IPv4 host has more than four parts")
    numbers = [_ipv4_number(p) if p else None for p in parts]
    if any(n is None for n in numbers):
        raise InvalidUrl("an IPv4 host with a part that is not a number")
    nums = [n for n in numbers if n is not None]
    if any(n > 255 for n in nums[:-1]) or nums[-1] >= 256 ** (5 - len(nums)):
        raise InvalidUrl("an IPv4 host out of range")
    value = nums[-1]
    for i, n in enumerate(nums[:-1]):
        value += n * 256 ** (3 - i)
    return ".".join(str((value >> s) & 0xFF) for s in (24, 16, 8, 0))


def _ipv6(text: str) -> str:
    """WHATWG's IPv6 serialization: lower-case hex, the first longest run of 2+ zeros as `::`."""
    try:
        pieces = [int(p, 16) for p in ipaddress.IPv6Address(text).exploded.split(":")]
    except ValueError as e:
        raise InvalidUrl(f"[{text}] is not an IPv6 address") from e
    best, best_len, i = -1, 1, 0
    while i < 8:
        j = i
        while j < 8 and pieces[j] == 0:
            j += 1
        if j - i > best_len:
            best, best_len = i, j - i
        i = j + 1 if j == i else j
    if best < 0:
        return ":".join(f"{p:x}" for p in pieces)
    head = ":".join(f"{p:x}" for p in pieces[:best])
    tail = ":".join(f"{p:x}" for p in pieces[best + best_len :])
    return f"{head}::{tail}"


def _host(text: str) -> str:
    if text.startswith("["):
        if not text.endswith("]"):
            raise InvalidUrl("an IPv6 host without its closing ]")
        return f"[{_ipv6(text[1:-1])}]"
    try:
        host = _decode_segment(text).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidUrl("the host is not UTF-8 once percent-decoded") from e
    if not host.isascii():
        raise InvalidUrl("a host with non-ASCII characters: write it in its ASCII (xn--) form")
    host = host.lower()
    if host == "" or any(c in _FORBIDDEN_HOST for c in host):
        raise InvalidUrl("the host is empty or holds a character a host cannot")
    return _ipv4(host) or host


def _path_segments(path: str) -> list[str]:
    """WHATWG's path state for a special scheme: `\\` is `/`, `.` and `..` (also `%2e`) resolve."""
    out: list[str] = []
    pieces = re.split(r"[/\\]", path)[1:] if path else []
    for n, seg in enumerate(pieces):
        last = n == len(pieces) - 1
        low = seg.lower()
        if low in ("..", ".%2e", "%2e.", "%2e%2e"):
            if out:
                out.pop()
            if last:
                out.append("")
        elif low in (".", "%2e"):
            if last:
                out.append("")
        else:
            out.append(seg)
    return out


def _quoted(text: str) -> str:
    """The URL quoted as the npm package quotes it in messages (JSON.stringify)."""
    return json.dumps(text, ensure_ascii=False)


def normalize_stream_url(stream_url: str) -> StreamUrl:
    """Parses a stream URL into its normal form, or raises InvalidUrl."""
    if not isinstance(stream_url, str):
        raise InvalidUrl("the stream URL must be a string")
    if "?" in stream_url or "#" in stream_url:
        raise InvalidUrl(
            f"{_quoted(stream_url)}: a stream URL must not have a query or a fragment "
            "(the extension adds its own query)"
        )
    # WHATWG: leading and trailing C0 controls and spaces go, tabs and newlines anywhere.
    text = stream_url.strip("".join(chr(c) for c in range(0x21)))
    text = re.sub(r"[\t\n\r]", "", text)
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*):", text)
    if m is None:
        raise InvalidUrl(f"{_quoted(stream_url)} is not a URL")
    scheme = m.group(1).lower()
    if scheme not in _DEFAULT_PORT:
        raise InvalidUrl(f"{_quoted(stream_url)}: a stream URL must start with http:// or https://")
    rest = text[m.end() :].lstrip("/\\")
    end = re.search(r"[/\\]", rest)
    authority, path = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    userinfo, _, hostport = authority.rpartition("@")
    try:
        host, port = _split_port(hostport)
        host = _host(host)
    except InvalidUrl as e:
        raise InvalidUrl(f"{_quoted(stream_url)} is not a URL: {e}") from None
    host_port = host + (f":{port}" if port is not None and port != _DEFAULT_PORT[scheme] else "")
    parts = _path_segments(path)
    while parts and parts[-1] == "":
        parts.pop()
    segments = [_decode_segment(s) for s in parts]
    normal = "".join(f"/{_encode_segment(s)}" for s in segments)
    user, _, password = userinfo.partition(":")
    creds = _encode_userinfo(user) + (f":{_encode_userinfo(password)}" if password else "")
    at = f"{creds}@" if creds else ""
    return StreamUrl(
        identity=f"{scheme}://{host_port}{normal}",
        url=f"{scheme}://{at}{host_port}{normal}",
        segments=segments,
    )


def _split_port(hostport: str) -> tuple[str, int | None]:
    if hostport.startswith("[") and "]" in hostport:
        close = hostport.index("]")
        host, tail = hostport[: close + 1], hostport[close + 1 :]
        if tail and not tail.startswith(":"):
            raise InvalidUrl("text after an IPv6 host")
        digits = tail[1:] if tail else None
    else:
        host, sep, digits = hostport.rpartition(":")
        if not sep:
            host, digits = hostport, None
    if not digits:
        return host, None
    if not digits.isascii() or not digits.isdigit() or int(digits) > 65535:
        raise InvalidUrl(f"the port {digits!r} is not a number up to 65535")
    return host, int(digits)


def label_of(segments: list[bytes]) -> str:
    """The last two segments, decoded, joined by `-`, in `[a-z0-9_-]`, at most 64; `stream` for none."""
    if not segments:
        return "stream"
    text = "-".join(s.decode("utf-8", "replace") for s in segments[-2:])
    # ASCII-only lower-casing, as the npm package does: Unicode case tables change between versions.
    lower = "".join(c.lower() if "A" <= c <= "Z" else c for c in text)
    label = re.sub(r"[^a-z0-9_-]+", "_", lower)
    if label.startswith("-"):
        label = "_" + label[1:]
    return label[:64]


def hash_of(identity: str) -> str:
    """The first 32 hex digits of the SHA-256 of the stream's identity."""
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:32]


def file_name_for(stream_url: str, read_only_index: int = 0) -> str:
    """`<label>-<hash>.db`, or `<label>-<hash>-ro<n>.db` for a reader."""
    n = normalize_stream_url(stream_url)
    base = f"{label_of(n.segments)}-{hash_of(n.identity)}"
    return f"{base}-ro{read_only_index}.db" if read_only_index > 0 else f"{base}.db"


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
