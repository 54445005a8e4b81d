"""File naming and the default directory, as the package gives them.

The names come from the extension's `sqlite_ursula_file_name` (vfs/src/naming.rs), which the npm
package calls too; `vfs/tests/naming/` holds the vectors and what Node.js's own WHATWG URL parser
gives for them (`expected.json`, written by `whatwg.mjs`). The live test runs that script and
checks the file still says what Node.js says.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sqlite_ursula import _naming as naming
from sqlite_ursula import default_dir, file_name_for

VECTORS = Path(__file__).resolve().parents[2] / "vfs" / "tests" / "naming"
P = "http://127.0.0.1:4437"


def python_names(urls: list[str]) -> list[dict[str, Any]]:
    """What the package gives for each URL, in expected.json's shape."""
    out: list[dict[str, Any]] = []
    for url in urls:
        try:
            n = naming.normalize_stream_url(url)
        except naming.InvalidUrl:
            out.append({"url": url, "error": "invalid_url"})
            continue
        name, ro3 = file_name_for(url), file_name_for(url, 3)
        out.append({"url": url, "identity": n.identity, "attach": n.url, "name": name, "ro3": ro3})
    return out


def vectors() -> dict[str, Any]:
    return json.loads((VECTORS / "urls.json").read_text())


def expected() -> dict[str, Any]:
    return json.loads((VECTORS / "expected.json").read_text())


def test_the_spec_example() -> None:
    h = hashlib.sha256(f"{P}/demo/notes".encode()).hexdigest()[:32]
    assert file_name_for(f"{P}/demo/notes") == f"demo-notes-{h}.db"
    assert file_name_for(f"{P}/demo/notes", 2) == f"demo-notes-{h}-ro2.db"


def test_names_match_the_whatwg_parser_of_node() -> None:
    want = expected()
    assert [w["url"] for w in want["names"]] == vectors()["urls"], "expected.json is stale"
    assert python_names(vectors()["urls"]) == want["names"]
    # Some vectors must be refusals and some names, or the comparison proves little.
    assert sum("error" in w for w in want["names"]) >= 10
    assert len({w["name"] for w in want["names"] if "name" in w}) >= 30


def test_default_dirs_match_the_npm_package() -> None:
    got = [default_dir(env, platform) for env, platform in vectors()["envs"]]
    assert got == expected()["dirs"]


def test_the_expected_file_is_what_node_says() -> None:
    node = os.environ.get("NODE") or shutil.which("node")
    if not node:
        pytest.skip("no Node.js (set NODE): expected.json is checked against the file only")
    out = subprocess.run(
        [node, str(VECTORS / "whatwg.mjs"), str(VECTORS / "urls.json")],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(out.stdout) == expected(), (
        "regenerate: node vfs/tests/naming/whatwg.mjs vfs/tests/naming/urls.json > vfs/tests/naming/expected.json"
    )


def test_label_and_length_rules() -> None:
    assert file_name_for(f"{P}/demo/Stream.Name%20X!!").startswith("demo-stream_name_x_-")
    assert file_name_for(f"{P}/-abc/notes").startswith("_abc-notes-")
    assert file_name_for(P).startswith("stream-")
    assert file_name_for(f"{P}/x/y/Z").startswith("y-z-")
    assert file_name_for(f"{P}/%C3%A9/%C3%84").startswith("_-_-")
    longest = file_name_for(f"{P}/bucket/{'s' * 100}", 8)
    assert len(longest) == 104
    assert longest.endswith("-ro8.db") and longest[:64] == "bucket-" + "s" * 57


def test_refusals() -> None:
    for bad in (f"{P}/a/b?x=1", f"{P}/a/b#f", "ftp://h/a/b", "not a url", "http://h:99999/a", f"{P}/a\0b"):
        with pytest.raises(naming.InvalidUrl):
            naming.normalize_stream_url(bad)
    with pytest.raises(naming.InvalidUrl, match="query or a fragment"):
        naming.normalize_stream_url(f"{P}/a/b?x=1")
    # An internationalised host is read as WHATWG reads it: the same file as its xn-- form.
    assert file_name_for("http://bücher.example/a/b") == file_name_for("http://xn--bcher-kva.example/a/b")


def test_default_dir_from_the_user_database(monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    home = pwd.getpwuid(os.getuid()).pw_dir
    assert default_dir({"HOME": "relative"}, "linux") == os.path.join(home, ".cache", "sqlite-ursula")
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))
    assert default_dir({"HOME": "relative"}, "linux") is None
