"""Escapes past the budgets: tables outside linear memory, compile bombs, a broken
compile cache and blocking or aborting WASI. Each ends in a named error (or one
clean CLI line) in bounded time and memory, and a healthy plugin answers after."""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import wasmtime
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext import (
    CompileCache,
    GuestTrap,
    InvalidModule,
    MemoryLimitExceeded,
    ModuleTooLarge,
    Plugin,
    Runtime,
    Timeout,
)
from wasmext.sandbox.wasmcheck import inspect
from wasmext.testing import DATA_AT, guest_wat, load_wat

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 10.0
# Peak RSS of a child that loads wasmext and calls one plugin, without any
# table: the interpreter, wasmtime and msgpack (measured ~60 MiB; generous).
OVERHEAD_KB = 200 * 1024
WASI = '(import "wasi_snapshot_preview1" "{0}" (func ${0} {1}))'
TABLE_GROW = """(if (i32.eq (table.grow $t (ref.null func) (i32.const 200000000)) (i32.const -1))
                  (then unreachable)) (i64.const 0)"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")]),
               XDG_CACHE_HOME=str(tmp_path / "xdg"))
    return env


def run_child(code: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run `code` in a child; returns the process and the child's own peak RSS in KiB.

    The child reports its VmHWM at exit. Neither RUSAGE_CHILDREN (the peak of every
    child this process ever waited for) nor the child's RUSAGE_SELF (Linux keeps the
    forked copy of this big test process in it across exec) measures the child alone.
    """
    peak = tmp_path / "peak-rss"
    report = ("import atexit\n"
              f"atexit.register(lambda: open({str(peak)!r}, 'w').write(next("
              "l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM'))))\n")
    proc = subprocess.run([sys.executable, "-c", report + textwrap.dedent(code)],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    return proc, int(peak.read_text())


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], env=_env(tmp_path),
                          capture_output=True, text=True, timeout=60)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], reason: str) -> None:
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "panicked" not in proc.stderr


def write(tmp_path: Path, name: str, wat_or_wasm: str | bytes) -> Path:
    path = tmp_path / name
    wasm = wat_or_wasm if isinstance(wat_or_wasm, bytes) else wasmtime.wat2wasm(wat_or_wasm)
    path.write_bytes(bytes(wasm))
    return path


# -- 1. tables outside linear memory ----------------------------------------------------


def test_table_grow_bomb_is_refused(runtime: Runtime, healthy: Plugin) -> None:
    plugin = load_wat(runtime, guest_wat(TABLE_GROW, extra="(table $t 1 funcref)"))
    started = time.monotonic()
    # The grow is refused (-1) and the guest traps on its own `unreachable`.
    with pytest.raises(GuestTrap):
        plugin.call("test", 1)
    assert time.monotonic() - started < BOUND_S
    assert healthy.call("test", "ping").value == "alive"


def test_table_grow_bomb_stays_within_rss(tmp_path: Path) -> None:
    proc, peak_kb = run_child(f"""
        import time
        from wasmext import GuestTrap, Runtime
        from wasmext.testing import guest_wat, load_wat
        with Runtime(cache=False) as rt:
            ok = load_wat(rt, guest_wat(response={{"ok": True, "value": "alive"}}), "healthy")
            p = load_wat(rt, guest_wat({TABLE_GROW!r}, extra="(table $t 1 funcref)"),
                         limits={{"memory_bytes": 16 * 2**20}})
            t = time.monotonic()
            try:
                p.call("test", 1)
            except GuestTrap:
                print("refused", time.monotonic() - t < 10, ok.call("test", 1).value)
        """, tmp_path)
    assert proc.stdout.split() == ["refused", "True", "alive"], proc.stderr
    assert peak_kb < 16 * 1024 + OVERHEAD_KB, peak_kb


def test_huge_declared_table_is_refused(runtime: Runtime, healthy: Plugin) -> None:
    started = time.monotonic()
    with pytest.raises(MemoryLimitExceeded, match="table_elements"):
        load_wat(runtime, guest_wat(extra="(table 200000000 funcref)"))
    assert time.monotonic() - started < BOUND_S
    assert healthy.call("test", 1).value == "alive"


# -- 2. compile bombs ---------------------------------------------------------------------


def many_functions(n: int) -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat(extra="(func)" * n)))


def huge_body(instructions: int) -> bytes:
    body = "(i32.const 1) (drop) " * (instructions // 2)
    return bytes(wasmtime.wat2wasm(guest_wat(extra=f"(func {body})")))


@pytest.mark.parametrize("make", [lambda: many_functions(60_000),
                                  lambda: huge_body(1_200_000)], ids=["60k-funcs", "1.2M-body"])
def test_compile_bombs_are_refused_quickly(runtime: Runtime, healthy: Plugin, make, tmp_path: Path
                                           ) -> None:
    wasm = make()
    started = time.monotonic()
    with pytest.raises(ModuleTooLarge):
        runtime.load(wasm, plugin_id="bomb")
    assert time.monotonic() - started < 1.0
    assert healthy.call("test", 1).value == "alive"
    started = time.monotonic()
    proc = cli(tmp_path, "call", str(write(tmp_path, "bomb.wasm", wasm)), "test")
    assert time.monotonic() - started < BOUND_S
    assert_clean_failure(proc, "module too large")


def test_section_walker_counts() -> None:
    wasm = bytes(wasmtime.wat2wasm(guest_wat(
        imports='(import "wasmext" "log" (func (param i32 i32 i32)))',
        extra="(func (nop)) (func (nop) (nop)) (table 7 funcref)")))
    shape = inspect(wasm)
    assert shape.imported_functions == 1
    assert shape.functions == 6  # four ABI functions and the two above
    assert shape.table_minimums == (7,)
    assert shape.largest_body >= 4 and shape.code_bytes >= shape.largest_body


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_section_walker_never_raises_anything_else(data: bytes) -> None:
    for blob in (data, b"\0asm\x01\0\0\0" + data):
        with contextlib.suppress(InvalidModule):
            inspect(blob)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 40), st.integers(0, 300), st.integers(0, 5))
def test_section_walker_counts_generated_modules(funcs: int, nops: int, tables: int) -> None:
    extra = "(func)" * funcs + f"(func {'(nop)' * nops})" + \
        "".join(f"(table {i} funcref)" for i in range(tables))
    shape = inspect(bytes(wasmtime.wat2wasm(guest_wat(extra=extra))))
    assert shape.functions == 4 + funcs + 1
    assert shape.table_minimums == tuple(range(tables))
    assert shape.largest_body >= nops


# -- 3. the compile cache in unexpected states ---------------------------------------------


STATES = ["key-is-dir", "key-unreadable", "key-dangling-link", "key-short",
          "modules-is-file", "entry-is-dir"]


def break_cache(base: Path, state: str) -> None:
    modules, key = base / "modules", base / "cache.key"
    if state == "key-is-dir":
        key.unlink(missing_ok=True)
        key.mkdir(parents=True)
    elif state == "key-unreadable":
        key.write_bytes(b"k" * 32)
        key.chmod(0)
    elif state == "key-dangling-link":
        key.unlink(missing_ok=True)
        key.symlink_to(base / "nowhere" / "key")
    elif state == "key-short":
        key.write_bytes(b"k")
    elif state == "modules-is-file":
        if modules.is_dir():
            for p in modules.iterdir():
                p.unlink()
            modules.rmdir()
        modules.write_bytes(b"not a folder")
    else:
        for entry in modules.glob("*.cwasm"):
            entry.unlink()
            entry.mkdir()


@pytest.mark.parametrize("state", STATES)
def test_unexpected_cache_state_recompiles(tmp_path: Path, state: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    wasm = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "fine"})))
    base = tmp_path / "wasmext"
    with Runtime(cache=CompileCache(base / "modules", base / "cache.key")) as rt:
        rt.load(wasm, plugin_id="a")
    break_cache(base, state)
    if state == "key-unreadable":  # root reads anything: make the read fail as it would
        real = Path.read_bytes
        monkeypatch.setattr(Path, "read_bytes", lambda p: (_ for _ in ()).throw(
            PermissionError(13, "denied")) if p.name == "cache.key" else real(p))
    for _ in range(2):
        with Runtime(cache=CompileCache(base / "modules", base / "cache.key")) as rt:
            assert rt.load(wasm, plugin_id="a").call("test").value == "fine"


@pytest.mark.parametrize("state", ["key-is-dir", "key-dangling-link", "modules-is-file",
                                   "entry-is-dir"])
def test_cli_survives_unexpected_cache_state(tmp_path: Path, state: str) -> None:
    path = write(tmp_path, "ok.wasm", guest_wat(response={"ok": True, "value": "fine"}))
    assert cli(tmp_path, "call", str(path), "test").returncode == 0
    break_cache(tmp_path / "xdg" / "wasmext", state)
    proc = cli(tmp_path, "call", str(path), "test")
    assert proc.returncode == 0 and proc.stdout.strip() == '"fine"', proc.stderr
    assert "Traceback" not in proc.stderr


# -- 4. WASI: no blocking past the deadline, no abort at exit -------------------------------


SLEEP_15S = struct.pack("<QB7xIxxxxQQH6x", 7, 0, 1, 15_000_000_000, 0, 0)
POLL = WASI.format("poll_oneoff", "(param i32 i32 i32 i32) (result i32)")
SLEEPER = guest_wat(f"(drop (call $poll_oneoff (i32.const {DATA_AT}) (i32.const 30000) "
                    "(i32.const 1) (i32.const 30100))) (i64.const 0)", imports=POLL,
                    data=SLEEP_15S)
READ_FD5 = guest_wat(
    "(if (i32.ne (call $fd_read (i32.const 5) (i32.const 100) (i32.const 1) (i32.const 200))"
    " (i32.const 8)) (then unreachable)) (i64.const 0)",
    imports=WASI.format("fd_read", "(param i32 i32 i32 i32) (result i32)"))
OPEN_FD0 = guest_wat(
    "(if (i32.ne (call $path_open (i32.const 0) (i32.const 0) (i32.const 100) (i32.const 4)"
    " (i32.const 0) (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 200)) (i32.const 8))"
    " (then unreachable)) (i64.const 0)",
    imports=WASI.format("path_open", "(param i32 i32 i32 i32 i32 i64 i64 i32 i32) "
                        "(result i32)"))


def test_wasi_sleep_past_deadline_times_out(runtime: Runtime, healthy: Plugin) -> None:
    plugin = load_wat(runtime, SLEEPER, limits={"timeout_ms": 200})
    started = time.monotonic()
    with pytest.raises(Timeout):
        plugin.call("test", 1)
    assert time.monotonic() - started < BOUND_S
    assert healthy.call("test", 1).value == "alive"


@pytest.mark.parametrize("wat", [READ_FD5, OPEN_FD0], ids=["fd_read-5", "path_open-0"])
def test_wasi_unknown_fds_answer_ebadf(runtime: Runtime, healthy: Plugin, wat: str) -> None:
    assert load_wat(runtime, wat).call("test", 3).value == 3
    assert healthy.call("test", 1).value == "alive"


def test_cli_wasi_sleep_is_one_line_within_bounds(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = cli(tmp_path, "call", str(write(tmp_path, "sleep.wasm", SLEEPER)), "test",
               "--timeout-ms", "200")
    assert time.monotonic() - started < BOUND_S
    assert_clean_failure(proc, "timeout")


@pytest.mark.parametrize("wat", [READ_FD5, OPEN_FD0], ids=["fd_read-5", "path_open-0"])
def test_cli_wasi_unknown_fds_exit_cleanly(tmp_path: Path, wat: str) -> None:
    proc = cli(tmp_path, "call", str(write(tmp_path, "w.wasm", wat)), "test", "--data", "3")
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout.strip() == "3" and proc.stderr == ""


def test_wasi_import_outside_preview1_is_refused(runtime: Runtime) -> None:
    from wasmext import UnknownImport

    with pytest.raises(UnknownImport):
        load_wat(runtime, guest_wat(imports=WASI.format("no_such_call", "(result i32)")))
