"""The real `ursula server` on a free loopback port, and helpers: stream URLs, child Pythons.

The package under test is the one installed from the wheel (scripts/test-python.sh installs it
into a venv); nothing here puts python/src on sys.path.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def ursula_bin() -> str:
    profile = os.environ.get("URSULA_PROFILE_DIR") or str(REPO / "target" / "ci")
    path = os.environ.get("URSULA_BIN") or os.path.join(profile, "ursula")
    if not os.path.isfile(path):
        raise RuntimeError(
            f"the ursula binary {path} is missing: cargo build --profile ci -p ursula, or set URSULA_BIN"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Requests to the loopback server must not go through a proxy from the environment.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Server:
    base: str
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cwd = tmp_path_factory.mktemp("ursula-server")
    proc = subprocess.Popen(
        [ursula_bin(), "server", "--listen", f"127.0.0.1:{port}", "--admin-listen", "off"],
        cwd=cwd,
        env={**os.environ, "RUST_LOG": "warn"},
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"ursula server exited with {proc.returncode}")
        try:
            with _opener.open(f"{base}/__ursula/ready", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"ursula server did not become ready at {base}")
        time.sleep(0.05)
    yield Server(base=base, process=proc)
    proc.kill()
    proc.wait()


_n = itertools.count(1)


@pytest.fixture
def url(server: Server) -> str:
    """A stream URL no other test (or earlier run against the same server) uses."""
    return f"{server.base}/py{os.getpid()}x{time.time_ns() // 1_000_000:x}/db{next(_n)}"


def run_python(code: str, *, python: str = sys.executable, env: dict[str, str] | None = None) -> Any:
    """Runs `code` in a child Python; returns the JSON its last stdout line holds."""
    out = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env if env is not None else os.environ,
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise AssertionError(f"child python failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# A child's report of the Ursula error it caught, for run_python's JSON.
REPORT_ERROR = """
def report(e):
    print(json.dumps({"class": type(e).__name__, "kind": e.kind, "action": e.action, "message": str(e)}))
"""
