"""`wasmext state`: list, read, delete, export and import between backends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack

from wasmext.state import Scope, SQLiteStore


def wasmext(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", "state", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=60)


def test_state_commands(tmp_path: Path) -> None:
    (tmp_path / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n')
    with SQLiteStore.in_data_dir(tmp_path / "data") as store:
        store.set(Scope("pii-mask", "s1"), "count", msgpack.packb({"n": 3}))
        store.set(Scope("pii-mask"), "total", msgpack.packb(7))
    listed = json.loads(wasmext("ls", "--json", cwd=tmp_path).stdout)
    assert {(r["plugin"], r["session"], r["key"]) for r in listed} == {
        ("pii-mask", "s1", "count"), ("pii-mask", None, "total")}
    got = wasmext("get", "pii-mask", "count", "--session", "s1", cwd=tmp_path)
    assert json.loads(got.stdout) == {"n": 3}
    assert wasmext("get", "pii-mask", "nope", cwd=tmp_path).returncode == 1
    for fmt in ("json", "msgpack"):
        out = tmp_path / f"backup.{fmt}"
        assert wasmext("export", "--format", fmt, "-o", str(out), cwd=tmp_path).returncode == 0
    assert wasmext("rm", "pii-mask", "total", cwd=tmp_path).stdout.strip() == "deleted"
    # A move to another backend: import the JSON backup into a fresh data dir.
    other = tmp_path / "other"
    other.mkdir()
    (other / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n')
    done = wasmext("import", "--format", "json", str(tmp_path / "backup.json"), cwd=other)
    assert done.stdout.strip() == "imported 2 entries", done.stderr
    assert json.loads(wasmext("get", "pii-mask", "total", cwd=other).stdout) == 7
