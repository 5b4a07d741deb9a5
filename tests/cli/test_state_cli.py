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


def test_plugin_chosen_keys_and_values_reach_the_terminal_inert(tmp_path: Path) -> None:
    """A plugin picks its state keys and values: no escape, control or bidi character of
    theirs reaches the operator's terminal through `state ls` or `state get`."""
    hostile = "k\x1b[2J\x1b]0;owned\x07\u202eevil\r\nforged line"
    (tmp_path / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n')
    with SQLiteStore.in_data_dir(tmp_path / "data") as store:
        store.set(Scope("p", "s\x1b[31m"), hostile, msgpack.packb({"v": hostile}))
        store.set(Scope("p"), "long", msgpack.packb("x" * 100))
    for out in (wasmext("ls", cwd=tmp_path).stdout,
                wasmext("get", "p", hostile, "--session", "s\x1b[31m", cwd=tmp_path).stdout):
        assert out.strip()
        assert not any(ch in out for ch in "\x1b\x07\r\u202e"), repr(out)
    assert len(wasmext("ls", cwd=tmp_path).stdout.splitlines()) == 2  # no forged line
    got = wasmext("get", "p", hostile, "--session", "s\x1b[31m", cwd=tmp_path).stdout
    assert json.loads(got) == {"v": hostile}  # escaped, not altered
    assert json.loads(wasmext("get", "p", "long", cwd=tmp_path).stdout) == "x" * 100


def test_an_export_reads_back_by_its_own_name(tmp_path: Path) -> None:
    """`export -o backup.json` wrote MessagePack into backup.json, which `import backup.json`
    (format from the extension) then refused: each now takes the format from the name."""
    (tmp_path / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n')
    with SQLiteStore.in_data_dir(tmp_path / "data") as store:
        store.set(Scope("pii-mask"), "total", msgpack.packb(7))
    for name, load in (("backup.json", json.loads), ("backup.mpk", msgpack.unpackb),
                       ("backup.bin", msgpack.unpackb)):
        assert wasmext("export", "-o", name, cwd=tmp_path).returncode == 0
        assert load((tmp_path / name).read_bytes())["format"] == "wasmext-state"
        other = tmp_path / f"from-{name}"
        other.mkdir()
        (other / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n')
        source = str(tmp_path / name)
        fmt = ["--format", "msgpack"] if name.endswith(".bin") else []
        done = wasmext("import", *fmt, source, cwd=other)
        assert done.stdout.strip() == "imported 1 entries", done.stderr


def test_an_empty_listing_says_so_and_where_it_looked(tmp_path: Path) -> None:
    """`state ls` with nothing stored printed nothing at all, exit 0: the operator could
    not tell an empty store from one it did not look in."""
    (tmp_path / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n[plugins]\n'
                                           'workspace_dir = "plugins"\n')
    (tmp_path / "plugins" / "kb").mkdir(parents=True)
    (tmp_path / "plugins" / "kb" / "plugin.toml").write_text('id = "kb"\nversion = "1"\n')
    empty = wasmext("ls", cwd=tmp_path)
    assert empty.returncode == 0 and empty.stdout == ""
    assert empty.stderr.strip() == "no stored state (state backend sqlite, data_dir data)"
    mine = wasmext("ls", "--plugin", "kb", cwd=tmp_path)
    assert mine.returncode == 0 and mine.stdout == ""
    assert mine.stderr.strip().startswith("no stored state of plugin kb (")
    assert json.loads(wasmext("ls", "--json", cwd=tmp_path).stdout) == []  # stays quiet
    with SQLiteStore.in_data_dir(tmp_path / "data") as store:
        store.set(Scope("kb"), "total", msgpack.packb(7))
    full = wasmext("ls", cwd=tmp_path)
    assert "total" in full.stdout and full.stderr == ""
