"""connect, attach, status and set_token against the real server: replication, readers,
fencing, and the refusals that must happen before anything is attached."""

from __future__ import annotations

import stat
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import sqlite_ursula as su
from conftest import run_python

STATUS_FIELDS = {
    "offset", "epoch", "poisoned", "fenced", "reason", "read_only", "writes_refused", "refused_kind",
    "refused_reason", "payment_required", "payment_reason", "snapshot", "retained", "local", "installed",
    "attach_ms", "commits", "append_retries", "log_bytes", "snapshot_due_bytes", "snapshot_age_ms",
    "snapshot_failures", "snapshot_error", "snapshot_bytes", "error", "following", "tail", "lag_bytes",
    "lag_ms", "at",
}  # fmt: skip


def seed(url: str, where: Path, rows: int = 2) -> Any:
    """A writable connection in `where` with `rows` committed rows."""
    db = su.connect(url, dir=where)
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
    db.executemany("INSERT INTO notes(body) VALUES (?)", [(f"row {i}",) for i in range(rows)])
    db.commit()
    return db


def test_connect_names_the_file_after_the_stream_and_status_reports(url: str, tmp_path: Path) -> None:
    db = seed(url, tmp_path)
    assert isinstance(db, su.load().Connection)
    name = su.file_name_for(url)
    assert (tmp_path / name).is_file() and (tmp_path / f"{name}-ursula").is_file()
    s = su.status(db)
    assert set(s) == STATUS_FIELDS
    assert s["offset"] == su.status(tmp_path / name)["offset"] == su.status(str(tmp_path / name))["offset"]
    assert s["commits"] == 2 and s["poisoned"] is False and s["read_only"] is False and s["error"] is None
    assert isinstance(s["offset"], str) and int(s["offset"]) > 0 and s["epoch"] >= 1
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    stats = su.drain_stats(db)
    assert len(stats["commits"]) == 2 and {"checkpoints_us", "snapshots"} <= set(stats)


def test_a_commit_replicates_and_a_second_owner_fences_the_first(url: str, tmp_path: Path) -> None:
    db = seed(url, tmp_path / "one")
    # Another process rebuilds the database from the stream into its own file and claims it.
    code = f"""
import json, sqlite_ursula as su
db = su.connect({url!r}, path={str(tmp_path / "two.db")!r})
rows = db.execute("SELECT body FROM notes ORDER BY id").fetchall()
db.execute("INSERT INTO notes(body) VALUES ('from the new owner')")
db.commit()
print(json.dumps([r[0] for r in rows]))
"""
    assert run_python(code) == ["row 0", "row 1"]
    # The commit of `with db:` (the driver's __exit__ calls commit() by name, so the classified
    # one) meets the fence; test_drivers.py's stdlib scenario calls commit() itself.
    with pytest.raises(su.UrsulaFencedError) as caught:
        with db:
            db.execute("INSERT INTO notes(body) VALUES ('late')")
    e = caught.value
    assert (e.kind, e.action, e.fenced) == ("fenced", "stop", True)
    assert str(e).startswith("commit not replicated: ") and "stop using this database" in str(e)
    assert e.__cause__ is not None and e.sqlite_errorcode in (10, 778)
    assert isinstance(e, su.UrsulaReplicationError) and isinstance(e, su.UrsulaError)
    s = su.status(db)
    assert s["poisoned"] and s["fenced"] and s["error"]["kind"] == "fenced"
    with pytest.raises(su.UrsulaFencedError, match="^read refused, the file is fenced"):
        db.execute("SELECT count(*) FROM notes").fetchall()
    # The ROLLBACK rule: SQLite rolled back already; a plain ROLLBACK is a no-op, RELEASE throws
    # the kept error again.
    db.rollback()
    db.execute("ROLLBACK")
    with pytest.raises(su.UrsulaFencedError) as again:
        db.execute("RELEASE sp")
    assert again.value.kind == "fenced"


def test_read_only_sees_the_rows_and_refuses_writes(url: str, tmp_path: Path) -> None:
    seed(url, tmp_path / "owner", rows=3)
    where = tmp_path / "readers"
    r1 = su.connect(url, dir=where, read_only=True)
    r2 = su.connect(url, dir=where, read_only=True)
    assert (where / su.file_name_for(url, 1)).is_file() and (where / su.file_name_for(url, 2)).is_file()
    assert not (where / su.file_name_for(url)).exists()
    for r in (r1, r2):
        assert [x[0] for x in r.execute("SELECT body FROM notes ORDER BY id")] == ["row 0", "row 1", "row 2"]
        assert su.status(r)["read_only"] is True
    mod = su.load()
    with pytest.raises(mod.OperationalError) as caught:
        r1.execute("INSERT INTO notes(body) VALUES ('no')")
        r1.commit()
    # SQLite's own refusal, not an Ursula error.
    assert not isinstance(caught.value, su.UrsulaError)
    assert "readonly" in str(caught.value) and caught.value.sqlite_errorcode & 0xFF == 8
    r1.rollback()


def wait_until(what: str, check: Any, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_follow_replica_keeps_applying_the_owners_commits_and_stops_when_the_stream_goes(
    url: str, tmp_path: Path
) -> None:
    owner = seed(url, tmp_path / "owner", rows=1)
    replica = su.connect(url, dir=tmp_path / "replica", read_only=True, follow=True)
    count = lambda: replica.execute("SELECT count(*) FROM notes").fetchone()[0]  # noqa: E731
    assert count() == 1
    for i in range(5):
        owner.execute("INSERT INTO notes(body) VALUES (?)", (f"more {i}",))
        owner.commit()
        wait_until("the commit on the replica", lambda: count() == i + 2)
    s = su.status(replica)
    assert s["following"] is True and s["read_only"] is True and s["error"] is None
    wait_until("the replica at the owner's offset", lambda: su.status(replica)["offset"] == su.status(owner)["offset"])
    with pytest.raises(su.UrsulaSetupError) as no_ro:
        su.connect(url, dir=tmp_path / "x", follow=True)
    assert no_ro.value.kind == "invalid_argument" and "needs read_only=True" in str(no_ro.value)
    owner.close()
    req = urllib.request.Request(url, method="DELETE")
    with urllib.request.urlopen(req) as r:
        assert r.status == 204
    wait_until("the replica to stop", lambda: su.status(replica)["following"] is False)
    with pytest.raises(su.UrsulaReattachError) as stopped:
        count()
    assert (stopped.value.kind, stopped.value.action) == ("not_found", "reattach")
    assert "stopped following" in str(stopped.value)


def test_at_opens_the_database_as_it_was_at_each_listed_commit_point(url: str, tmp_path: Path) -> None:
    owner = seed(url, tmp_path / "owner", rows=0)
    points = []
    for i in range(3):
        owner.execute("INSERT INTO notes(body) VALUES (?)", (f"row {i}",))
        owner.commit()
        points.append(su.status(owner)["offset"])
    listed = [c["offset"] for c in su.commits(url)["commits"]]
    assert listed[-3:] == points
    for n, point in enumerate(points):
        past = su.connect(url, dir=tmp_path / f"at{n}", read_only=True, at=point)
        assert [r[0] for r in past.execute("SELECT body FROM notes ORDER BY id")] == [f"row {i}" for i in range(n + 1)]
        s = su.status(past)
        assert s["offset"] == point and s["at"] == point and s["read_only"] is True
        past.close()
    with pytest.raises(su.UrsulaSetupError) as no_ro:
        su.connect(url, dir=tmp_path / "x", at=points[0])
    assert no_ro.value.kind == "invalid_argument" and "needs read_only=True" in str(no_ro.value)
    with pytest.raises(su.UrsulaSetupError) as bad:
        su.connect(url, dir=tmp_path / "y", read_only=True, at="42")
    assert bad.value.kind == "invalid_argument"
    # The owner keeps committing: no at-open claimed the stream.
    owner.execute("INSERT INTO notes(body) VALUES ('after')")
    owner.commit()


def test_a_missing_stream_read_only_is_not_found(url: str, tmp_path: Path) -> None:
    with pytest.raises(su.UrsulaSetupError) as caught:
        su.connect(url, dir=tmp_path, read_only=True)
    assert (caught.value.kind, caught.value.action) == ("not_found", "fix")
    assert str(caught.value).startswith("ursula_attach: not_found: ")
    # status of the file whose attach failed names that attach's kind.
    with pytest.raises(su.UrsulaSetupError) as st:
        su.status(tmp_path / su.file_name_for(url, 1))
    assert st.value.kind == "not_found" and "attach_failed" in str(st.value)
    with pytest.raises(su.UrsulaSetupError) as na:
        su.status(tmp_path / "never.db")
    assert na.value.kind == "not_attached"


def test_unknown_and_wrong_options_raise_before_anything_is_attached(url: str, tmp_path: Path) -> None:
    with pytest.raises(
        su.UrsulaSetupError, match=r"unknown option 'readonly' \(did you mean read_only\?\)"
    ) as e:
        su.connect(url, dir=tmp_path, readonly=True)
    assert (e.value.kind, e.value.action) == ("invalid_argument", "fix")
    with pytest.raises(su.UrsulaSetupError, match="unknown option 'readOnly'"):
        su.connect(url, dir=tmp_path, readOnly=True)
    with pytest.raises(su.UrsulaSetupError, match="option 'uri' is not taken"):
        su.connect(url, dir=tmp_path, uri=True)
    with pytest.raises(su.UrsulaSetupError, match="read_only must be a bool"):
        su.connect(url, dir=tmp_path, read_only="yes")
    with pytest.raises(TypeError):  # the driver's own check of its options
        su.connect(url, dir=tmp_path, timeout="soon")
    for bad in (":memory:", "", "file:x.db"):
        with pytest.raises(su.UrsulaSetupError) as p:
            su.connect(url, path=bad)
        assert p.value.kind == "invalid_argument"
    for bad_url in (url + "?x=1", "ftp://h/a/b", "not a url"):
        with pytest.raises(su.UrsulaSetupError) as u:
            su.connect(bad_url, dir=tmp_path)
        assert u.value.kind == "invalid_url"
    assert list(tmp_path.iterdir()) == []
    # Nothing claimed the stream either: it does not exist.
    with pytest.raises(su.UrsulaSetupError, match="not_found"):
        su.connect(url, dir=tmp_path / "r", read_only=True)


def test_the_default_directory(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    db = seed(url, tmp_path / "unused")
    db.close()
    reader = su.connect(url, read_only=True)
    where = tmp_path / "cache" / "sqlite-ursula"
    assert su.status(where / su.file_name_for(url, 1))["read_only"] is True
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    reader.close()


def test_attach_by_hand_then_open_with_the_driver(url: str, tmp_path: Path) -> None:
    file = tmp_path / "manual.db"
    offset = su.attach(file, url)
    assert isinstance(offset, str)
    db = su.load().connect(str(file))
    db.execute("CREATE TABLE t(x)")
    db.commit()
    assert su.status(db)["commits"] == 1  # a plain connection is found by its main file
    with pytest.raises(su.UrsulaSetupError) as e:
        su.attach(file, 42)  # type: ignore[arg-type]
    assert e.value.kind == "invalid_url"


def test_a_journal_mode_change_is_refused_and_the_connection_stays_usable(url: str, tmp_path: Path) -> None:
    seed(url, tmp_path / "seed").close()

    class Mine(su.load().Connection):  # type: ignore[misc,name-defined]
        pass

    # A caller's factory keeps its class, and its statements are classified all the same.
    db = su.connect(url, dir=tmp_path, factory=Mine)
    assert isinstance(db, Mine)
    with pytest.raises(su.UrsulaSetupError) as e:
        db.execute("PRAGMA journal_mode=DELETE")
    assert (e.value.kind, e.value.action) == ("unsupported", "fix")
    assert str(e.value).startswith("sqlite-ursula-vfs: unsupported: PRAGMA journal_mode")
    db.execute("INSERT INTO notes(body) VALUES ('still')")
    db.commit()
    assert su.status(db)["commits"] == 1 and db.execute("SELECT count(*) FROM notes").fetchone() == (3,)


def test_set_token(url: str, tmp_path: Path) -> None:
    with pytest.raises(su.UrsulaSetupError) as e:
        su.set_token(5)  # type: ignore[arg-type]
    assert e.value.kind == "invalid_argument"
    su.set_token("a-token")  # the server checks no token: commits go on
    try:
        db = seed(url, tmp_path)
        assert su.status(db)["commits"] == 2
    finally:
        su.set_token(None)


def test_a_retained_refusal_names_the_earliest_reachable_point() -> None:
    from sqlite_ursula._errors import attach_error

    point = "00000000000000004242"
    e = attach_error(f"ursula_attach: retained: 00000000000000000001 is gone: the earliest reachable point is {point}", "retained")
    assert isinstance(e, su.UrsulaSetupError) and (e.kind, e.action, e.earliest) == ("retained", "fix", point)
    assert attach_error("ursula_attach: not_found: gone", "not_found").earliest is None
