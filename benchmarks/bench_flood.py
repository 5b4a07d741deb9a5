"""A guest flooding its log: 40 MB through WASI stdout in one call, against the same
guest writing only as many lines as the per-call cap keeps.

    python benchmarks/bench_flood.py [--quick] [--json PATH]

The flood writes 64-byte lines in 32 KiB `fd_write`s (655,360 lines); the floor
writes 1,000 lines (the default `max_log_lines`, all kept). Past the cap a write
costs a newline count, so the ratio stays near the cost of copying 40 MB out of
guest memory: it does not grow with the number of lines dropped.
`benchmarks/run.py --flood` adds this section.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from pathlib import Path
from typing import Any

from wasmext import Runtime
from wasmext.testing import DATA_AT, guest_wat, load_wat

LINE = b"x" * 63 + b"\n"
CHUNK = LINE * 512
FLOOD_BYTES = 40 * 1024 * 1024
FD_WRITE = ('(import "wasi_snapshot_preview1" "fd_write" '
            '(func $fd_write (param i32 i32 i32 i32) (result i32)))')


def _writer(writes: int, chunk: bytes) -> str:
    body = f"""(local $i i32)
      (loop $more
        (drop (call $fd_write (i32.const 1) (i32.const {DATA_AT}) (i32.const 1)
                              (i32.const {DATA_AT + 8})))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $more (i32.lt_u (local.get $i) (i32.const {writes}))))
      (i64.const 0)"""
    data = struct.pack("<II", DATA_AT + 16, len(chunk)) + b"\0" * 8 + chunk
    return guest_wat(body, imports=FD_WRITE, data=data)


def _time(plugin: Any, n: int) -> float:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        plugin.call("test")
        samples.append(time.perf_counter() - started)
    return sorted(samples)[len(samples) // 2] * 1000


def measure(quick: bool = False) -> dict[str, Any]:
    """The flood's and the floor's p50 (ms), interleaved, and what the log kept."""
    rounds = 3 if quick else 7
    with Runtime(cache=False) as rt:
        limits = {"max_log_lines": 1000, "timeout_ms": 60_000}
        flood = load_wat(rt, _writer(FLOOD_BYTES // len(CHUNK), CHUNK), "flood", limits=limits)
        floor = load_wat(rt, _writer(1, LINE * 1000), "floor", limits=limits)
        flood_ms: list[float] = []
        floor_ms: list[float] = []
        for _ in range(rounds):
            flood_ms.append(_time(flood, 1))
            floor_ms.append(_time(floor, 1))
        p50 = sorted(flood_ms)[rounds // 2]
        base = sorted(floor_ms)[rounds // 2]
        return {"flood_ms": round(p50, 2), "floor_ms": round(base, 2),
                "ratio": round(p50 / base, 2), "lines_kept": len(flood.log.lines),
                "lines_capped": getattr(flood.log, "capped", None),  # None: before the cap
                "lines_per_call": FLOOD_BYTES // len(LINE), "rounds": rounds}


def report(result: dict[str, Any]) -> str:
    """The section's lines for run.py's report."""
    return (f"log flood: 40 MB in one call {result['flood_ms']} ms vs writing the 1,000-line "
            f"cap {result['floor_ms']} ms: {result['ratio']}x "
            f"({result['lines_capped']} lines dropped over the cap in "
            f"{result['rounds']} calls, {result['lines_kept']} kept)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    result = measure(args.quick)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
