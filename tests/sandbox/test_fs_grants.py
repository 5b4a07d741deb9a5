"""Folder grants (`fs:PATH[:ro|rw]`) through the host's own WASI preview 1.

Every attack runs a tiny WAT guest (tests/sandbox/fsguest.py) against a granted
folder beside a canary file and folder outside it, and asserts: the WASI errno (or
the named error) the guest got, a time bound, that nothing outside the folder was
read or written, and that a healthy plugin answers afterwards.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
import wasmtime
from fsguest import (
    CREAT,
    DIRECTORY,
    EXCL,
    RIGHTS_RW,
    TRUNC,
    Script,
    counter,
    errno,
    filestat,
    hold_open,
    many_iovecs,
    read_back,
)

from support import Built
from wasmext import (
    ConfigError,
    GuestTrap,
    Host,
    HostCallLimitExceeded,
    Plugin,
    PluginError,
    Runtime,
    load_config,
)
from wasmext.capabilities import capability_problem
from wasmext.lifecycle.approvals import ApprovalStore, subject_of
from wasmext.sandbox.fsgrants import FsQuota, fs_grants, parse_fs_grant
from wasmext.sandbox.wasi import MAX_WRITE
from wasmext.sandbox.wasifs import MAX_OPEN, FsTable
from wasmext.sandbox.wasifs import run as run_op
from wasmext.testing import guest_wat, load_wat

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 10.0  # generous: these calls take milliseconds; this only catches a hang
SECRET = b"S-outside-secret"
OK, ACCES, BADF, DQUOT, EXIST, MFILE, NOENT, NOTDIR, PERM, ROFS, NOTCAPABLE = \
    0, 2, 8, 19, 20, 33, 44, 54, 63, 69, 76


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A granted folder `box` with a file and a subfolder, beside outside canaries."""
    folder = tmp_path / "box"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"I-inside-a")
    (folder / "sub" / "b.txt").write_bytes(b"I-inside-b")
    (tmp_path / "canary.txt").write_bytes(SECRET)
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "x").write_bytes(SECRET)
    return folder


def outside_intact(tmp_path: Path) -> None:
    """The canaries outside the folder are as they were, and nothing was added there."""
    assert (tmp_path / "canary.txt").read_bytes() == SECRET
    assert sorted(p.name for p in (tmp_path / "outdir").iterdir()) == ["x"]
    assert (tmp_path / "outdir" / "x").read_bytes() == SECRET
    assert sorted(p.name for p in tmp_path.iterdir()
                  if p.name not in ("cache", "data", "plugins", "wasmext.toml")) == \
        ["box", "canary.txt", "outdir"]


def run(runtime: Runtime, script: Script, grants: list[str],
        plugin_id: str = "fs-guest", **kwargs: object) -> tuple[bytes, float]:
    plugin = load_wat(runtime, script.wat(), plugin_id=plugin_id, grants=frozenset(grants),
                      **kwargs)
    started = time.monotonic()
    value = plugin.call("test", None).value
    return bytes(value), time.monotonic() - started


def test_a_granted_folder_reads_writes_and_lists(runtime: Runtime, box: Path, tmp_path: Path,
                                                 healthy: Plugin) -> None:
    s = Script()
    s.prestat_name(3, 400)
    f = s.open("a.txt")
    s.read(f, 64)
    s.close(f)
    w = s.open("new.txt", CREAT | EXCL, RIGHTS_RW)
    s.write(w, b"hello")
    s.close(w)
    s.open("new.txt", CREAT | EXCL, RIGHTS_RW)
    s.path("path_create_directory", "made")
    s.rename("new.txt", "made/moved.txt")
    s.stat("made/moved.txt", 100)
    up = s.open("sub/../sub/b.txt")
    s.read(up, 16, offset=200)
    d = s.open("sub", DIRECTORY)
    s.readdir(d, 300, 90)
    s.path("path_unlink_file", "sub/b.txt")
    s.path("path_remove_directory", "sub")
    value, took = run(runtime, s, [f"fs:{box}:rw"])
    assert [errno(value, i) for i in range(len(s.steps))] == \
        [OK] * 7 + [EXIST] + [OK] * 9
    assert read_back(value, 400, 8) == b"/box"
    assert read_back(value, 0, 64) == b"I-inside-a"
    assert read_back(value, 200, 16) == b"I-inside-b"
    assert filestat(value, 100) == {"type": 4, "nlink": 1, "size": 5}
    assert b"b.txt" in read_back(value, 300, 90)
    assert (box / "made" / "moved.txt").read_bytes() == b"hello"
    assert not (box / "sub").exists()
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_read_only_grant_refuses_every_change(runtime: Runtime, box: Path, tmp_path: Path,
                                              healthy: Plugin) -> None:
    s = Script()
    s.open("a.txt", 0, RIGHTS_RW)
    s.open("fresh.txt", CREAT, RIGHTS_RW)
    s.open("a.txt", TRUNC)
    s.path("path_create_directory", "d")
    s.path("path_unlink_file", "a.txt")
    s.rename("a.txt", "b.txt")
    f = s.open("a.txt")
    s.read(f, 64)
    value, took = run(runtime, s, [f"fs:{box}"])  # read-only is the default
    assert [errno(value, i) for i in range(6)] == [ROFS] * 6
    assert errno(value, 6) == errno(value, 7) == OK
    assert read_back(value, 0, 64) == b"I-inside-a"
    assert (box / "a.txt").read_bytes() == b"I-inside-a"
    assert sorted(p.name for p in box.iterdir()) == ["a.txt", "sub"]
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_dotdot_and_absolute_paths_never_leave_the_folder(
        runtime: Runtime, box: Path, tmp_path: Path, healthy: Plugin) -> None:
    s = Script()
    for path in ("../canary.txt", "sub/../../canary.txt", "sub/../../box/../canary.txt",
                 str(tmp_path / "canary.txt"), "/etc/passwd", "..", "../outdir/x"):
        s.read(s.open(path), 64)
    s.open("../escape.txt", CREAT, RIGHTS_RW)
    s.path("path_create_directory", "../outdir/new")
    s.path("path_unlink_file", "../canary.txt")
    s.rename("a.txt", "../stolen.txt")
    sub = s.open("sub", DIRECTORY)                       # 18: an fd inside the folder
    for path in ("..", "../../canary.txt", "../a.txt", "b.txt/../.."):
        s.read(s.open(path, fd=sub), 64)                 # 19..26: no climbing above it
    value, took = run(runtime, s, [f"fs:{box}:rw"])
    assert [errno(value, 2 * i) for i in range(7)] == [NOTCAPABLE] * 7
    assert [errno(value, 14 + i) for i in range(4)] == [NOTCAPABLE] * 4
    assert errno(value, 18) == OK
    assert [errno(value, 19 + 2 * i) for i in range(4)] == [NOTCAPABLE] * 4
    assert SECRET not in value
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_symlinks_inside_are_never_followed(runtime: Runtime, box: Path, tmp_path: Path,
                                            healthy: Plugin) -> None:
    (box / "link").symlink_to(tmp_path / "canary.txt")
    (box / "linkdir").symlink_to(tmp_path / "outdir")
    (box / "rel").symlink_to("../canary.txt")
    (box / "dangling").symlink_to(tmp_path / "outdir" / "made-by-guest")
    s = Script()
    s.read(s.open("link"), 64)                                   # 0, 1
    s.read(s.open("linkdir/x"), 64)                              # 2, 3
    s.read(s.open("rel"), 64)                                    # 4, 5
    s.open("dangling", CREAT, RIGHTS_RW)                         # 6
    s.open("link", TRUNC, RIGHTS_RW)                             # 7
    s.open("linkdir/new", CREAT, RIGHTS_RW)                      # 8
    s.path("path_create_directory", "linkdir/made")              # 9
    s.stat("link", 0)                                            # 10: describes the link
    s.path("path_unlink_file", "link")                           # 11: removes the link only
    s.link("a.txt", "hard")                                      # 12
    value, took = run(runtime, s, [f"fs:{box}:rw"])
    assert errno(value, 0) == errno(value, 4) == errno(value, 6) == errno(value, 7) \
        == NOTCAPABLE
    assert errno(value, 2) in (NOTCAPABLE, NOTDIR) and errno(value, 8) in (NOTCAPABLE, NOTDIR)
    assert errno(value, 9) in (NOTCAPABLE, NOTDIR)
    assert errno(value, 10) == OK and filestat(value, 0)["type"] == 7  # a symlink
    assert errno(value, 11) == OK and not (box / "link").is_symlink()
    assert errno(value, 12) == PERM  # the guest makes no links
    assert SECRET not in value
    assert not (tmp_path / "outdir" / "made-by-guest").exists()
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_hard_links_to_outside_files_are_refused(runtime: Runtime, box: Path, tmp_path: Path,
                                                 healthy: Plugin) -> None:
    os.link(tmp_path / "canary.txt", box / "hard")
    s = Script()
    s.read(s.open("hard"), 64)
    s.open("hard", 0, RIGHTS_RW)
    s.open("hard", TRUNC, RIGHTS_RW)
    value, took = run(runtime, s, [f"fs:{box}:rw"])
    assert [errno(value, i) for i in (0, 2, 3)] == [ACCES] * 3
    assert SECRET not in value
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_fifos_and_devices_are_refused_without_waiting(
        runtime: Runtime, box: Path, tmp_path: Path, healthy: Plugin) -> None:
    os.mkfifo(box / "fifo")
    device = os.geteuid() == 0  # only root makes device nodes; CI runs as root
    if device:
        os.mknod(box / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    s = Script()
    s.read(s.open("fifo"), 64)
    s.open("fifo", 0, RIGHTS_RW)
    s.open("null" if device else "fifo", 0, RIGHTS_RW)
    s.open("null" if device else "fifo")
    value, took = run(runtime, s, [f"fs:{box}:rw"])
    assert [errno(value, i) for i in (0, 2, 3, 4)] == [ACCES] * 4
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_a_folder_swapped_for_a_symlink_mid_call_never_leads_out(
        runtime: Runtime, box: Path, tmp_path: Path, healthy: Plugin) -> None:
    (box / "sub" / "x").write_bytes(b"I-inside-x")
    stop = threading.Event()

    def swap() -> None:  # sub <-> a symlink to the outside folder, as fast as it goes
        real, link = box / "sub.real", box / "sub.link"
        link.symlink_to(tmp_path / "outdir")
        while not stop.is_set():
            os.rename(box / "sub", real)
            os.rename(link, box / "sub")
            os.rename(box / "sub", link)
            os.rename(real, box / "sub")

    s = Script()
    reads = s.race_reads("sub/x", 500, ord("S"))
    s.race_writes("sub/x", 250)
    s.race_writes("sub/new", 250)
    plugin = load_wat(runtime, s.wat(), plugin_id="fs-guest", grants=frozenset([f"fs:{box}:rw"]))
    racer = threading.Thread(target=swap, daemon=True)
    racer.start()
    opened = leaked = 0
    try:
        for _ in range(4):  # short calls: their host time stays far below the budget
            started = time.monotonic()
            value = bytes(plugin.call("test", None).value)
            assert time.monotonic() - started < BOUND_S
            opened += counter(value, reads)
            leaked += counter(value, reads, 4)
    finally:
        stop.set()
        racer.join()
    assert opened > 0   # the race ran: some opens found the real folder
    assert leaked == 0  # and none read the file outside
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_huge_writes_stop_at_the_byte_quota(runtime: Runtime, box: Path, tmp_path: Path,
                                            healthy: Plugin) -> None:
    runtime.services.fs_quota = FsQuota(max_bytes=1 << 20, max_files=100)
    s = Script()
    f = s.open("big.bin", CREAT, RIGHTS_RW)
    flood = s.flood_bytes(f, 1000)
    value, took = run(runtime, s, [f"fs:{box}:rw"])
    assert errno(value, flood) == DQUOT
    assert counter(value, flood) <= 16
    assert (box / "big.bin").stat().st_size <= 1 << 20
    plugin = runtime.plugins["fs-guest"]
    assert any("fs quota of /box" in line.text for line in plugin.log.lines)
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_file_count_floods_stop_at_the_entry_quota(runtime: Runtime, box: Path, tmp_path: Path,
                                                   healthy: Plugin) -> None:
    runtime.services.fs_quota = FsQuota(max_files=50)
    s = Script()
    flood = s.flood_files("f", 5000)
    value, took = run(runtime, s, [f"fs:{box}:rw"])
    assert errno(value, flood) == DQUOT
    entries = sum(1 for _ in box.rglob("*"))
    assert entries <= 50 and counter(value, flood) == 50 - 3  # a.txt, sub, sub/b.txt
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_bytes_moved_in_one_call_are_bounded(runtime: Runtime, box: Path, tmp_path: Path,
                                             healthy: Plugin) -> None:
    runtime.services.fs_quota = FsQuota(max_io_bytes=256 * 1024)
    s = Script()
    f = s.open("big.bin", CREAT, RIGHTS_RW)
    s.flood_bytes(f, 100)
    plugin = load_wat(runtime, s.wat(), plugin_id="fs-guest", grants=frozenset([f"fs:{box}:rw"]))
    started = time.monotonic()
    with pytest.raises(HostCallLimitExceeded, match="bytes of file reads and writes"):
        plugin.call("test", None)
    assert time.monotonic() - started < BOUND_S
    assert (box / "big.bin").stat().st_size <= 256 * 1024
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"
    (box / "big.bin").write_bytes(b"r" * (1 << 20))
    reader = Script()
    reader.flood_bytes(reader.open("big.bin"), 100, op="fd_read")
    plugin = load_wat(runtime, reader.wat(), plugin_id="fs-reader",
                      grants=frozenset([f"fs:{box}"]))
    with pytest.raises(HostCallLimitExceeded, match="bytes of file reads and writes"):
        plugin.call("test", None)
    assert healthy.call("test", None).value == "alive"


def test_no_grant_maps_nothing_and_a_revoked_grant_stops_at_once(
        runtime: Runtime, box: Path, tmp_path: Path, healthy: Plugin) -> None:
    s = Script()
    s.prestat_name(3, 300)
    s.read(s.open("a.txt"), 64)
    value, _ = run(runtime, s, [], plugin_id="no-grant")
    assert [errno(value, i) for i in range(2)] == [BADF] * 2
    granted, _ = run(runtime, s, [f"fs:{box}"], plugin_id="granted")
    assert read_back(granted, 300, 8) == b"/box"
    assert read_back(granted, 0, 64) == b"I-inside-a"
    plugin = runtime.plugins["granted"]
    live = plugin.new_instance()  # an instance that has the folder open, as mid-call
    assert read_back(bytes(live.call("test", None).value), 0, 64) == b"I-inside-a"
    plugin.set_grants(frozenset())
    value = bytes(live.call("test", None).value)
    assert errno(value, 1) == NOTCAPABLE and b"I-inside" not in value
    value = bytes(plugin.call("test", None).value)  # a fresh instance: no folder at all
    assert [errno(value, i) for i in range(2)] == [BADF] * 2
    assert healthy.call("test", None).value == "alive"


def test_grant_strings() -> None:
    ro, rw = parse_fs_grant("fs:/srv/notes"), parse_fs_grant("fs:/srv/notes:rw")
    assert ro is not None and not ro.writable and ro.guest_path == "/notes"
    assert rw is not None and rw.writable
    assert parse_fs_grant("fs:/srv/a:b:ro") is not None  # a colon inside the path
    for bad in ("fs:notes", "fs:/", "fs::rw", "fs:/a\x1b[31m"):
        assert parse_fs_grant(bad) is None
        assert capability_problem(bad) is not None
    assert capability_problem("fs:/srv/notes:rw") is None
    # two folders of one name: the first by host path keeps the guest path
    assert [g.path for g in fs_grants(["fs:/b/notes", "fs:/a/notes", "fs:/c/kb"])] == \
        ["/c/kb", "/a/notes"]


def test_the_operator_grants_a_folder_and_the_grant_is_pinned(tmp_path: Path,
                                                              box: Path) -> None:
    s = Script()
    s.read(s.open("a.txt"), 64)
    folder = tmp_path / "plugins" / "notes"
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text('id = "notes"\nversion = "0.1.0"\n'
                                        'capabilities = ["fs"]\n')  # asks; grants nothing
    (folder / "notes.wasm").write_bytes(bytes(wasmtime.wat2wasm(s.wat())))
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')

    def first_read() -> tuple[int, bytes]:
        with Host(load_config(config)) as host:
            value = bytes(host.plugins["notes"].plugin.call("test", None).value)
        return errno(value, 0), read_back(value, 0, 64)

    assert first_read() == (BADF, b"")  # requested in the manifest, not granted
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "grant", "notes", "fs:box",
                           "--by", "ann", "--config", str(config)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"granted fs:{box} to notes" in proc.stdout  # a relative folder made absolute
    assert [a.capability for a in ApprovalStore.in_data_dir(tmp_path / "data").all()] == \
        [f"fs:{box}"]
    assert first_read() == (OK, b"I-inside-a")
    (folder / "plugin.toml").write_text('id = "notes"\nversion = "0.1.1"\n'
                                        'capabilities = ["fs"]\n')
    assert first_read() == (BADF, b"")  # a changed manifest does not inherit the folder
    outside_intact(tmp_path)


def test_a_c_plugin_uses_the_folder_through_wasi_libc(runtime: Runtime, built: Built,
                                                      box: Path, tmp_path: Path,
                                                      healthy: Plugin) -> None:
    plugin = runtime.load(built["c-files"], grants=frozenset([f"fs:{box}:rw"]))
    started = time.monotonic()

    def call(hook: str, data: str) -> object:
        return plugin.call(hook, data).value

    assert call("read", "/box/a.txt") == "I-inside-a"
    assert call("write", "/box/new.txt\nhello") == "ok"
    assert call("append", "/box/new.txt\n, world") == "ok"
    assert call("read", "/box/new.txt") == "hello, world"
    assert call("size", "/box/new.txt") == "12"
    assert call("mkdir", "/box/made") == "ok"
    assert call("rename", "/box/new.txt\n/box/made/moved.txt") == "ok"
    assert sorted(str(call("list", "/box")).split("\n")) == ["a.txt", "made", "sub"]
    assert call("list", "/box/made") == "moved.txt"
    assert call("remove", "/box/sub/b.txt") == "ok" and call("remove", "/box/sub") == "ok"
    (box / "many").mkdir()
    for i in range(300):  # more than one fd_readdir buffer of wasi-libc's
        (box / "many" / f"a-file-with-a-longer-name-{i}.txt").touch()
    listed = str(call("list", "/box/many")).split("\n")
    assert len(listed) == len(set(listed)) == 300
    assert (box / "made" / "moved.txt").read_bytes() == b"hello, world"
    (box / "link").symlink_to(tmp_path / "canary.txt")
    for hook, data in (("read", "/box/../canary.txt"), ("read", str(tmp_path / "canary.txt")),
                       ("read", "/box/link"), ("write", "/box/link\npwned"),
                       ("write", "/box/../escape.txt\npwned"), ("list", "/box/.."),
                       ("read", "/etc/passwd")):
        with pytest.raises(PluginError) as info:
            call(hook, data)
        assert info.value.code == "failed"
        assert SECRET.decode() not in info.value.message
    assert time.monotonic() - started < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_the_fs_section_sets_every_folder_grants_bounds(tmp_path: Path) -> None:
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[fs]\nmax_bytes = 4096\nmax_files = 7\n')
    with Host(load_config(config)) as host:
        assert host.runtime.services.fs_quota == FsQuota(max_bytes=4096, max_files=7)
    config.write_text('[fs]\nmax_bytes = 0\nmax_files = "many"\nmax_inodes = 3\n')
    with pytest.raises(ConfigError) as info:
        load_config(config)
    fields = {where for where, _ in info.value.problems}
    assert {"fs.max_bytes", "fs.max_files", "fs.max_inodes"} <= fields


def test_the_sandbox_page_example_runs(tmp_path: Path, built: Built) -> None:
    built["c-files"]  # the toolchain the example builds with (a skip says how to install it)
    text = (ROOT / "docs" / "sandbox.md").read_text(encoding="utf-8")
    section = text[text.index("## Folder grants"):text.index("## Compile cache")]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    script = tmp_path / "example.py"
    script.write_text(block, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")]),
           "XDG_CACHE_HOME": str(tmp_path / "xdg"), "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "water the plants"
    assert lines[1].endswith("-> Capabilities insufficient")
    assert lines[2].endswith("-> No such file or directory")
    assert "not for plugins" not in done.stdout


def test_a_write_naming_all_memory_a_thousand_times_is_cut_short(
        runtime: Runtime, box: Path, tmp_path: Path, healthy: Plugin) -> None:
    s = Script()
    f = s.open("big.bin", CREAT, RIGHTS_RW)
    to_file = many_iovecs(s, f)
    to_stdout = many_iovecs(s, 1)
    value, took = run(runtime, s, [f"fs:{box}:rw"])
    assert errno(value, to_file) == errno(value, to_stdout) == OK
    assert counter(value, to_file) == counter(value, to_stdout) == MAX_WRITE
    assert (box / "big.bin").stat().st_size == MAX_WRITE
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_an_approved_folder_reaches_a_libc_plugin_loaded_by_a_host(
        tmp_path: Path, built: Built, box: Path) -> None:
    # wasi-libc learns its preopens when the instance starts; the Host's first instance
    # starts before the approvals apply, so a folder grant change restarts the pool.
    plugins = tmp_path / "plugins"
    shutil.copytree(built["c-files"], plugins / "c-files")
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    with Host(load_config(config)) as host:
        subject = subject_of(f"sha256:{host.plugins['c-files'].plugin.module.info.digest}",
                             host.plugins["c-files"].manifest)
    ApprovalStore.in_data_dir(tmp_path / "data").grant("c-files", subject, [f"fs:{box}"], "ann")
    with Host(load_config(config)) as host:
        plugin = host.plugins["c-files"].plugin
        assert plugin.call("read", "/box/a.txt").value == "I-inside-a"
        plugin.set_grants(plugin.grants - {f"fs:{box}"})  # revoked: gone at the next call
        with pytest.raises(PluginError, match="No such file"):
            plugin.call("read", "/box/a.txt")
        plugin.set_grants(plugin.grants | {f"fs:{box}:rw"})
        assert plugin.call("write", "/box/w.txt\nrw now").value == "ok"
    assert (box / "w.txt").read_text() == "rw now"
    outside_intact(tmp_path)


def test_wasmext_call_grants_a_folder_for_one_call(tmp_path: Path, built: Built,
                                                   box: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}

    def call(path: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wasmext_cli", "call", str(built["c-files"]),
                               "read", "--data", json.dumps(path), "--grant", "fs:box"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)

    assert json.loads(call("/box/a.txt").stdout) == "I-inside-a"
    escape = call("/box/../canary.txt")
    assert escape.returncode == 1 and "Capabilities insufficient" in escape.stderr
    assert SECRET.decode() not in escape.stdout + escape.stderr


def test_open_files_per_instance_are_bounded(runtime: Runtime, box: Path, tmp_path: Path,
                                             healthy: Plugin) -> None:
    s = Script()
    held = hold_open(s, "a.txt", 10_000)
    value, took = run(runtime, s, [f"fs:{box}"])
    assert errno(value, held) == MFILE
    assert counter(value, held) == MAX_OPEN - 1  # the preopen is one of them
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_a_faulted_instance_closes_its_files_at_once(runtime: Runtime, box: Path,
                                                     tmp_path: Path, healthy: Plugin) -> None:
    s = Script()
    hold_open(s, "a.txt", 100)
    s.steps.append("unreachable")
    plugin = load_wat(runtime, s.wat(), plugin_id="fs-guest", grants=frozenset([f"fs:{box}"]))
    before = len(os.listdir("/proc/self/fd"))
    gc.disable()  # not left to a collection: closed when the instance is thrown away
    try:
        for _ in range(3):
            with pytest.raises(GuestTrap):
                plugin.call("test", None)
        assert len(os.listdir("/proc/self/fd")) <= before + 2
    finally:
        gc.enable()
    assert healthy.call("test", None).value == "alive"


def test_a_go_plugin_uses_the_folder_through_its_os_package(
        crt: Runtime, built: Built, box: Path, tmp_path: Path) -> None:
    (box / "link").symlink_to(tmp_path / "canary.txt")
    # The run's compile cache: the 2.6 MB module is compiled once, when it is built.
    plugin = crt.load(built["go-files"], grants=frozenset([f"fs:{box}:rw"]))
    assert plugin.call("read", "/box/a.txt").value == "I-inside-a"
    assert plugin.call("write", "/box/go.txt\nfrom go").value == "ok"
    assert (box / "go.txt").read_text() == "from go"
    assert sorted(plugin.call("list", "/box").value.split(",")) == \
        ["a.txt", "go.txt", "link", "sub"]
    started = time.monotonic()
    for hook, data in (("read", "/box/../canary.txt"), ("read", "/box/link"),
                       ("write", "/box/link\npwned"), ("read", str(tmp_path / "canary.txt"))):
        with pytest.raises(PluginError) as info:
            plugin.call(hook, data)
        assert SECRET.decode() not in info.value.message
    assert time.monotonic() - started < BOUND_S
    outside_intact(tmp_path)
    healthy = load_wat(crt, guest_wat(response={"ok": True, "value": "alive"}), plugin_id="ok")
    assert healthy.call("test", None).value == "alive"


def test_a_positioned_write_to_an_append_fd_counts_what_it_appends(box: Path,
                                                                   tmp_path: Path) -> None:
    # Linux appends a pwrite on an O_APPEND fd at the end whatever offset it names, so
    # the quota must count it as growth (else pwrite at 0 grew the file for free).
    notes: list[str] = []
    quota = FsQuota(max_bytes=64 * 1024, max_files=1000)
    table = FsTable(lambda: frozenset([f"fs:{box}:rw"]), quota, lambda n: None, notes.append)
    code, fd = run_op(lambda: table.open(3, b"log.txt", CREAT, RIGHTS_RW, 1))  # 1: append
    assert code == OK
    wrote = 0
    for _ in range(100):
        code, n = run_op(lambda: table.write(fd, b"x" * 4096, at=0))
        if code != OK:
            break
        wrote += n
    assert code == DQUOT
    assert (box / "log.txt").stat().st_size == wrote <= 64 * 1024
    assert notes and "over its 65536 bytes" in notes[0]
    table.close_all()
    outside_intact(tmp_path)


def _held_bytes(box: Path) -> int:
    """Bytes of the files under `box`, those unlinked but still open in this process too."""
    on_disk = sum(p.stat().st_size for p in box.rglob("*") if p.is_file())
    held = 0
    for link in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(link)
            if target.startswith(str(box)) and target.endswith(" (deleted)"):
                held += link.stat().st_size
    return on_disk + held


@pytest.mark.parametrize("remove", ["unlink", "rename"])
def test_a_removed_file_still_open_keeps_counting_against_the_quota(
        runtime: Runtime, box: Path, tmp_path: Path, healthy: Plugin, remove: str) -> None:
    # Removing a file's name while an fd holds it frees nothing on the disk: crediting
    # its bytes back at unlink (or at a rename over it) let a guest fill a quota, drop
    # the name, keep writing through the fd and fill it again, 128 fds times over.
    runtime.services.fs_quota = FsQuota(max_bytes=1 << 20, max_files=100)
    s = Script()
    f = s.open("big.bin", CREAT, RIGHTS_RW)
    first = s.flood_bytes(f, 1000)
    if remove == "unlink":
        gone = s.path("path_unlink_file", "big.bin")
    else:
        s.close(s.open("small.bin", CREAT, RIGHTS_RW))
        gone = s.rename("small.bin", "big.bin")
    again = s.flood_bytes(f, 1000)
    g = s.open("other.bin", CREAT, RIGHTS_RW)
    other = s.flood_bytes(g, 1000)
    plugin = load_wat(runtime, s.wat(), plugin_id="fs-guest", grants=frozenset([f"fs:{box}:rw"]))
    started = time.monotonic()
    value = bytes(plugin.call("test", None).value)
    took = time.monotonic() - started
    assert errno(value, first) == DQUOT and errno(value, gone) == OK
    assert errno(value, again) == DQUOT and counter(value, again) == 0
    assert errno(value, other) == DQUOT and counter(value, other) == 0
    assert _held_bytes(box) <= 1 << 20
    assert took < BOUND_S
    plugin.close()
    gc.collect()
    # Once the last fd closes, the disk is free and so is the quota.
    writer = Script()
    writer.flood_bytes(writer.open("after.bin", CREAT, RIGHTS_RW), 4)
    value, _ = run(runtime, writer, [f"fs:{box}:rw"], plugin_id="fs-after")
    assert errno(value, 0) == OK and counter(value, 1) == 4
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_a_folder_granted_inside_another_shares_the_outer_quota(
        runtime: Runtime, box: Path, tmp_path: Path, healthy: Plugin) -> None:
    # Granted /box and /box/sub, a guest wrote a full quota through each: /box held
    # twice its own bound.
    runtime.services.fs_quota = FsQuota(max_bytes=1 << 20, max_files=100)
    s = Script()
    inner = s.flood_bytes(s.open("big.bin", CREAT, RIGHTS_RW, fd=4), 1000)
    outer = s.flood_bytes(s.open("big.bin", CREAT, RIGHTS_RW, fd=3), 1000)
    value, took = run(runtime, s, [f"fs:{box}:rw", f"fs:{box}/sub:rw"])
    assert errno(value, inner) == DQUOT and errno(value, outer) == DQUOT
    assert counter(value, inner) == 15 and counter(value, outer) == 0
    assert _held_bytes(box) <= 1 << 20
    assert took < BOUND_S
    outside_intact(tmp_path)
    assert healthy.call("test", None).value == "alive"


def test_growth_by_a_far_offset_or_a_size_is_growth(box: Path, tmp_path: Path) -> None:
    # A seek past the end then one byte, a pwrite at 1 TiB and set_size to 1 TiB each
    # ask for a sparse file as large as the offset: each is growth the quota refuses.
    notes: list[str] = []
    table = FsTable(lambda: frozenset([f"fs:{box}:rw"]), FsQuota(max_bytes=1 << 20),
                    lambda n: None, notes.append)
    code, fd = run_op(lambda: table.open(3, b"sparse.bin", CREAT, RIGHTS_RW, 0))
    assert code == OK
    started = time.monotonic()
    assert run_op(lambda: table.seek(fd, 1 << 40, 0)) == (OK, 1 << 40)
    assert run_op(lambda: table.write(fd, b"x"))[0] == DQUOT
    assert run_op(lambda: table.write(fd, b"x", at=1 << 40))[0] == DQUOT
    assert run_op(lambda: table.set_size(fd, 1 << 40))[0] == DQUOT
    assert time.monotonic() - started < BOUND_S
    assert (box / "sparse.bin").stat().st_size == 0 and len(notes) == 3
    read_only = FsTable(lambda: frozenset([f"fs:{box}"]), FsQuota(), lambda n: None,
                        notes.append)
    assert run_op(lambda: read_only.open(3, b"a.txt", TRUNC, RIGHTS_RW, 0))[0] == ROFS
    assert run_op(lambda: read_only.open(3, b"a.txt", 0, RIGHTS_RW, 1))[0] == ROFS
    assert (box / "a.txt").read_bytes() == b"I-inside-a"
    table.close_all()
    read_only.close_all()
    outside_intact(tmp_path)


def test_listings_of_many_fds_do_not_pile_up_in_host_memory(box: Path, tmp_path: Path) -> None:
    # fd_readdir keeps a folder's listing on its fd; a guest opening one full folder
    # 127 times and listing each made the host keep 127 listings (463 MB for 10,000
    # names of 255 bytes), none of it in the plugin's memory limit.
    for i in range(2000):
        (box / (f"{i:05d}" + "n" * 240)).touch()
    table = FsTable(lambda: frozenset([f"fs:{box}:rw"]), FsQuota(), lambda n: None,
                    lambda n: None)
    first: list[int] = []
    tracemalloc.start()
    try:
        started = time.monotonic()
        for _ in range(60):
            code, fd = run_op(lambda: table.open(3, b".", DIRECTORY, 2, 0))
            assert code == OK
            assert run_op(lambda fd=fd: table.readdir(fd, 64, 0))[0] == OK
            first.append(fd)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 16 * 2**20, held
    assert time.monotonic() - started < 60
    # An fd whose listing was dropped goes on where it was: read again from the folder.
    code, whole = run_op(lambda: table.readdir(first[0], 1 << 20, 0))
    code, rest = run_op(lambda: table.readdir(first[1], 1 << 20, 5))
    assert code == OK and rest and rest in whole
    table.close_all()
    outside_intact(tmp_path)
