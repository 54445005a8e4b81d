"""Python's pysqlite3 as a host of the extension: load it, attach a file, commit, and read the
commits back from a rebuild in another file. Driven by tests/python_host.rs."""

import json
import sys

import pysqlite3.dbapi2 as sqlite3

ext, url, owner_path, copy_path = sys.argv[1:5]

ctl = sqlite3.connect(":memory:")
ctl.enable_load_extension(True)
ctl.load_extension(ext)

offset = ctl.execute("SELECT ursula_attach(?, ?)", (owner_path, url)).fetchone()[0]
assert isinstance(offset, str), offset

db = sqlite3.connect(owner_path)
db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
db.execute("INSERT INTO notes(body) VALUES ('from python')")
db.commit()
status = json.loads(ctl.execute("SELECT ursula_status(?)", (owner_path,)).fetchone()[0])
assert status["commits"] == 2, status
assert status["poisoned"] is False, status

ctl.execute("SELECT ursula_attach(?, ?, 'read_only')", (copy_path, url)).fetchone()
copy = sqlite3.connect(copy_path)
rows = [r[0] for r in copy.execute("SELECT body FROM notes ORDER BY id")]
assert rows == ["from python"], rows
print("pysqlite3", sqlite3.sqlite_version, "ok")
