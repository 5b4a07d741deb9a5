"""A guest flooding its log: one call may write `max_log_lines` lines, the rest are
dropped unread and counted, so a 40 MB flood ends well inside its deadline and
the host keeps serving."""

from __future__ import annotations

import struct
import time

import pytest

from wasmext import Plugin, Runtime
from wasmext.testing import DATA_AT, guest_wat, load_wat

LINE = b"x" * 63 + b"\n"
CHUNK = LINE * 512  # 32 KiB per fd_write
FLOOD = 40 * 1024 * 1024
WRITES = FLOOD // len(CHUNK)
IOVEC_AT, NWRITTEN_AT, TEXT_AT = DATA_AT, DATA_AT + 8, DATA_AT + 16
FD_WRITE = ('(import "wasi_snapshot_preview1" "fd_write" '
            '(func $fd_write (param i32 i32 i32 i32) (result i32)))')
LOG = '(import "wasmext" "log" (func $log (param i32 i32 i32)))'


def _stdout_flood(writes: int) -> str:
    body = f"""(local $i i32)
      (loop $more
        (drop (call $fd_write (i32.const 1) (i32.const {IOVEC_AT}) (i32.const 1)
                              (i32.const {NWRITTEN_AT})))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $more (i32.lt_u (local.get $i) (i32.const {writes}))))
      (i64.const 0)"""
    data = struct.pack("<II", TEXT_AT, len(CHUNK)) + b"\0" * 8 + CHUNK
    return guest_wat(body, imports=FD_WRITE, data=data)


def _log_flood(calls: int) -> str:
    body = f"""(local $i i32)
      (loop $more
        (call $log (i32.const 2) (i32.const {DATA_AT}) (i32.const {len(LINE) - 1}))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $more (i32.lt_u (local.get $i) (i32.const {calls}))))
      (i64.const 0)"""
    return guest_wat(body, imports=LOG, data=LINE)


def test_a_40_mb_stdout_flood_is_capped_per_call(runtime: Runtime, healthy: Plugin) -> None:
    plugin = load_wat(runtime, _stdout_flood(WRITES), plugin_id="flood",
                      limits={"max_log_lines": 1000, "timeout_ms": 5000})
    started = time.monotonic()
    plugin.call("test")  # not a Timeout: past the cap a write costs a newline count
    assert time.monotonic() - started < 5.0
    lines = list(plugin.log.lines)
    assert len(lines) == 1000
    assert lines[-1].level == "warn" and "log cap reached" in lines[-1].text
    written = WRITES * CHUNK.count(b"\n")
    assert plugin.log.capped == written - 1000  # every line past the cap, counted
    assert all(ln.source == "stdout" and ln.text == "x" * 63 for ln in lines[:-1])
    # The cap is per call: the next call writes its own 1000 lines again.
    plugin.call("test")
    assert plugin.log.capped == 2 * (written - 1000)
    again = list(plugin.log.lines)
    assert "log cap reached" in again[-1].text and again[-2].text == "x" * 63
    assert healthy.call("test").value == "alive"


def test_a_log_import_flood_is_capped_per_call(runtime: Runtime, healthy: Plugin) -> None:
    calls = 990  # each `log` is a host call: max_host_calls (1000) bounds this flood
    plugin = load_wat(runtime, _log_flood(calls), plugin_id="log-flood",
                      limits={"max_log_lines": 50})
    plugin.call("test")
    lines = list(plugin.log.lines)
    assert len(lines) == 50 and "log cap reached" in lines[-1].text
    assert plugin.log.capped == calls - 50
    assert healthy.call("test").value == "alive"


@pytest.mark.parametrize("limit", [3])
def test_lines_under_the_cap_are_all_kept(runtime: Runtime, limit: int) -> None:
    plugin = load_wat(runtime, _log_flood(limit - 1), plugin_id="quiet",
                      limits={"max_log_lines": limit})
    plugin.call("test")
    assert [ln.text for ln in plugin.log.lines] == ["x" * 63] * (limit - 1)
    assert plugin.log.capped == 0
