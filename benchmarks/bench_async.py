"""1,000 concurrent async sessions: how long the event loop is ever kept from running.

    python benchmarks/bench_async.py [--quick] [--sessions N] [--json PATH]

Each session (`host.asession()`) awaits `on_plain_text` of a no-op plugin a few
times; all run at once on one loop. A ticker task sleeps 1 ms at a time and
records how late it wakes: the worst lateness is the loop's worst gap, what any
other coroutine on that loop (a web request, a heartbeat) may have to wait.
Measured with the hooks in the call pool (`inline_below_ms=0`) and inline
(`inline_below_ms` above the chain's worst case). Two floors, measured in the
same run: the ticker beside 1,000 tasks that each `await asyncio.sleep(0)` as
often (the loop's own cost of that many tasks), and the ticker beside one
thread running pure Python for as long as the pool run took (what the GIL and
the machine's load alone cost a loop that shares its process with one busy
thread: on 2 shared cores, 10-40 ms; with 6 such threads, hundreds).
`benchmarks/run.py --async-scale` adds this section.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import wasmtime

from wasmext.aio import worst_case_ms
from wasmext.testing import guest_wat, make_host

TICK_S = 0.001


def _noop() -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True},
                                             hooks=("on_plain_text",))))


class Ticker:
    """Wakes every TICK_S and keeps the worst lateness (ms), the last sleep included."""

    def __init__(self) -> None:
        self.worst_ms = 0.0
        self.gaps: list[float] = []
        self._stop = False
        self._since = time.perf_counter()

    def _late(self) -> None:
        late = (time.perf_counter() - self._since - TICK_S) * 1000
        self.gaps.append(late)
        self.worst_ms = max(self.worst_ms, late)

    async def run(self) -> None:
        while not self._stop:
            self._since = time.perf_counter()
            await asyncio.sleep(TICK_S)
            if not self._stop:
                self._late()

    def stop(self) -> None:
        """Stop, counting the sleep in progress (a loop starved to the end shows too)."""
        self._late()
        self._stop = True


async def _scale(host: Any, sessions: int, calls: int, inline_below_ms: float | None
                 ) -> dict[str, Any]:
    ticker = Ticker()
    tick = asyncio.create_task(ticker.run())
    await asyncio.sleep(0.01)

    async def one() -> None:
        async with host.asession(inline_below_ms=inline_below_ms) as s:
            for _ in range(calls):
                assert (await s.on_plain_text("hi")).value == "hi"

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(sessions)))
    elapsed = time.perf_counter() - started
    ticker.stop()
    await tick
    gaps = sorted(ticker.gaps)
    return {"worst_gap_ms": round(ticker.worst_ms, 2),
            "p99_gap_ms": round(gaps[int(0.99 * (len(gaps) - 1))], 2),
            "calls_per_s": round(sessions * calls / elapsed, 1)}


async def _floor(sessions: int, calls: int) -> dict[str, Any]:
    ticker = Ticker()
    tick = asyncio.create_task(ticker.run())
    await asyncio.sleep(0.01)

    async def one() -> None:
        for _ in range(calls + 2):
            await asyncio.sleep(0)

    await asyncio.gather(*(one() for _ in range(sessions)))
    ticker.stop()
    await tick
    return {"worst_gap_ms": round(ticker.worst_ms, 2)}


async def _busy_threads(threads: int, seconds: float) -> dict[str, Any]:
    ticker = Ticker()
    tick = asyncio.create_task(ticker.run())
    await asyncio.sleep(0.01)
    stop = time.monotonic() + seconds

    def spin() -> None:
        n = 0
        while time.monotonic() < stop:
            n += sum(range(200))
    busy = [threading.Thread(target=spin) for _ in range(threads)]
    for t in busy:
        t.start()
    while any(t.is_alive() for t in busy):
        await asyncio.sleep(0.01)
    ticker.stop()
    await tick
    return {"worst_gap_ms": round(ticker.worst_ms, 2), "threads": threads}


def measure(quick: bool = False, sessions: int = 1000) -> dict[str, Any]:
    """Worst loop gap for `sessions` concurrent sessions, pool and inline, and the floor."""
    calls = 2 if quick else 5
    host = make_host((_noop(), {"plugin_id": "noop"}))
    try:
        inline_ms = (worst_case_ms(host, "on_plain_text") or 0.0) + 1
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(_scale(host, 20, 1, 0))  # warm up threads and pools
            loop.run_until_complete(_scale(host, 20, 1, inline_ms))
            result: dict[str, Any] = {"sessions": sessions, "calls_per_session": calls}
            result["floor"] = loop.run_until_complete(_floor(sessions, calls))
            started = time.perf_counter()
            result["pool"] = loop.run_until_complete(_scale(host, sessions, calls, 0))
            result["busy_threads_floor"] = loop.run_until_complete(_busy_threads(
                1, time.perf_counter() - started))
            result["inline"] = loop.run_until_complete(_scale(host, sessions, calls,
                                                              inline_ms))
        finally:
            loop.close()
    finally:
        host.close()
    return result


def report(result: dict[str, Any]) -> str:
    """The section's lines for run.py's report."""
    lines = [f"{result['sessions']} concurrent async sessions x "
             f"{result['calls_per_session']} hooks: worst event-loop gap (target <= 20 ms)"]
    floor = result["floor"]["worst_gap_ms"]
    busy = result["busy_threads_floor"]
    lines.append(f"  floor (tasks awaiting sleep(0))  {floor:>8} ms")
    lines.append(f"  floor ({busy['threads']} busy Python threads)     "
                 f"{busy['worst_gap_ms']:>8} ms")
    for mode in ("pool", "inline"):
        r = result[mode]
        mark = "PASS" if r["worst_gap_ms"] <= 20 else "FAIL"
        lines.append(f"  {mode:32} {r['worst_gap_ms']:>8} ms  p99 {r['p99_gap_ms']} ms  "
                     f"{r['calls_per_s']} hooks/s  {mark}  "
                     f"{r['worst_gap_ms'] / max(busy['worst_gap_ms'], 0.01):.2f}x the "
                     "busy-threads floor")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    result = measure(args.quick, args.sessions)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
