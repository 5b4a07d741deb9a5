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
`benchmarks/run.py --async-scale` adds this section, measured in a fresh
interpreter (the heap of an application that embeds wasmext), with a full collection
forced in the harness's own larger heap beside it.

What held the loop longest in the inline run was CPython's full (generation 2)
garbage collection: it runs on whichever thread allocates (inline, the loop's)
and scans every tracked object of the process, most of them the ~60k that
importing wasmext and its dependencies left, so it took 20-40 ms alone. Each
mode reports its collections (`gc`: how many full ones ran, the longest in wall
and thread CPU ms) and how many objects the collector tracked when it started
(`tracked`: every full collection scans them all); the default modes are what a
library user gets without touching the collector. Both modes run again after
`wasmext.tune_gc()` (`pool_frozen`, `inline_frozen`; `frozen` objects left out):
the opt-in docs/embedding.md advises for thousands of sessions on one loop, and
what the `wasmext` commands do after start-up, so that a full collection scans
only what was made since.

Whether a full collection lands inside a timed run is luck (it follows how many
objects survived since the last one), so the benchmark also forces one with every
session open, in the default heap and after `tune_gc()` (`peak_collection`,
`peak_collection_frozen`: thread CPU ms and objects scanned): what the loop loses
whenever CPython runs one there.

`--where` also says where the loop was held in the pool and inline runs: every
handle that ran for over 2 ms (which callback, which coroutine), and every
`select` that returned over 2 ms later than its timeout asked (the loop thread
woke but waited for the GIL or for a core), with the loop thread's CPU time
beside the wall time of the stretch between two selects (their difference is
time spent waiting, not working). `--rounds N` repeats the whole measurement
and reports min / median / max of each figure: on a shared machine one run
says little.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import wasmtime

from wasmext import tune_gc
from wasmext.aio import worst_case_ms
from wasmext.testing import guest_wat, make_host

TICK_S = 0.001
# The pool and inline runs, then both again after gc.freeze().
MODES = ("pool", "inline", "pool_frozen", "inline_frozen")
LABELS = {"pool": "pool (default)", "inline": "inline (default)",
          "pool_frozen": "pool, after wasmext.tune_gc()",
          "inline_frozen": "inline, after wasmext.tune_gc()"}


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


SLOW_S = 0.002


class Where:
    """Where one loop spent its time: slow handles, late selects, work between selects."""

    def __init__(self) -> None:
        self.handles: list[tuple[float, str]] = []  # (ms, what ran)
        self.late_selects: list[tuple[float, float]] = []  # (ms late, timeout ms)
        self.stretches: list[tuple[float, float]] = []  # (wall ms, loop-thread CPU ms)

    @contextmanager
    def watching(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        """Record while the block runs (Handle._run and the loop's select wrapped)."""
        handle_run = asyncio.Handle._run
        selector = loop._selector  # type: ignore[attr-defined]
        select = selector.select
        clock, cpu = time.perf_counter, time.thread_time
        last: list[float] = []  # wall and CPU time when the last select returned
        where = self

        def timed_run(handle: asyncio.Handle) -> None:
            started = clock()
            handle_run(handle)
            took = clock() - started
            if took > SLOW_S:
                where.handles.append((took * 1000, _describe(handle)))

        def timed_select(timeout: float | None = None) -> Any:
            started, started_cpu = clock(), cpu()
            if last:
                where.stretches.append(((started - last[0]) * 1000,
                                        (started_cpu - last[1]) * 1000))
            events = select(timeout)
            ended = clock()
            late = ended - started - (timeout or 0.0)
            if timeout is not None and late > SLOW_S:
                where.late_selects.append((late * 1000, timeout * 1000))
            last[:] = [ended, cpu()]
            return events

        asyncio.Handle._run = timed_run  # type: ignore[method-assign]
        selector.select = timed_select
        try:
            yield
        finally:
            asyncio.Handle._run = handle_run  # type: ignore[method-assign]
            del selector.select

    def summary(self) -> dict[str, Any]:
        """The five worst of each, and totals."""
        wall = sum(w for w, _ in self.stretches)
        busy = sum(c for _, c in self.stretches)
        return {
            "slow_handles": [(round(ms, 2), what) for ms, what in sorted(self.handles)[::-1][:5]],
            "slow_handle_count": len(self.handles),
            "late_selects": [(round(ms, 2), round(t, 2))
                             for ms, t in sorted(self.late_selects)[::-1][:5]],
            "late_select_count": len(self.late_selects),
            "worst_stretches": [(round(w, 2), round(c, 2))
                                for w, c in sorted(self.stretches)[::-1][:5]],
            "work_wall_ms": round(wall, 1), "work_cpu_ms": round(busy, 1),
            "iterations": len(self.stretches)}


class Collections:
    """CPython's garbage collections while a block runs: full ones counted and timed."""

    def __init__(self) -> None:
        self.full = 0
        self.worst_wall_ms = self.worst_cpu_ms = 0.0
        self._started: tuple[float, float] | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
        elif self._started is not None:
            wall, cpu = self._started
            self.full += 1
            self.worst_wall_ms = max(self.worst_wall_ms, (time.perf_counter() - wall) * 1000)
            self.worst_cpu_ms = max(self.worst_cpu_ms, (time.thread_time() - cpu) * 1000)
            self._started = None

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count while the block runs."""
        gc.callbacks.append(self._callback)
        try:
            yield
        finally:
            gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        """Full collections, the longest one's wall and thread CPU ms."""
        return {"full": self.full, "worst_wall_ms": round(self.worst_wall_ms, 2),
                "worst_cpu_ms": round(self.worst_cpu_ms, 2)}


def _describe(handle: asyncio.Handle) -> str:
    callback = handle._callback  # type: ignore[attr-defined]
    name = getattr(callback, "__qualname__", type(callback).__name__)
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        name += " " + getattr(task.get_coro(), "__qualname__", "?")
    return name


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


async def _peak_collection(host: Any, sessions: int, inline_below_ms: float
                           ) -> dict[str, Any]:
    """`sessions` sessions open at once, each after one call: a full collection then
    (what lands on the loop whenever CPython runs one), thread CPU ms, best and median
    of five, and the objects it scanned."""
    release = asyncio.Event()
    opened = 0

    async def one() -> None:
        nonlocal opened
        async with host.asession(inline_below_ms=inline_below_ms) as s:
            await s.on_plain_text("hi")
            opened += 1
            await release.wait()

    tasks = [asyncio.create_task(one()) for _ in range(sessions)]
    while opened < sessions:
        await asyncio.sleep(0.005)
    gc.collect()
    scanned = len(gc.get_objects())
    cpu = []
    for _ in range(5):
        started = time.thread_time()
        gc.collect()
        cpu.append((time.thread_time() - started) * 1000)
    release.set()
    await asyncio.gather(*tasks)
    return {"scanned": scanned, "cpu_ms_min": round(min(cpu), 2),
            "cpu_ms_median": round(statistics.median(cpu), 2)}


def measure(quick: bool = False, sessions: int = 1000, where: bool = False
            ) -> dict[str, Any]:
    """Worst loop gap for `sessions` concurrent sessions, pool and inline, before and
    after `gc.freeze()`, and the floors (with `where`, also where the loop was held in
    the pool and inline runs)."""
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
            result["pool"] = _watched(loop, where, _scale(host, sessions, calls, 0))
            result["busy_threads_floor"] = loop.run_until_complete(_busy_threads(
                1, time.perf_counter() - started))
            result["inline"] = _watched(loop, where, _scale(host, sessions, calls,
                                                            inline_ms))
            result["peak_collection"] = loop.run_until_complete(
                _peak_collection(host, sessions, inline_ms))
            frozen = tune_gc()  # the opt-in docs/embedding.md advises after start-up
            try:
                result["peak_collection_frozen"] = loop.run_until_complete(
                    _peak_collection(host, sessions, inline_ms))
                result["pool_frozen"] = _watched(loop, False, _scale(host, sessions, calls, 0))
                result["inline_frozen"] = _watched(loop, False, _scale(
                    host, sessions, calls, inline_ms))
                for mode in ("pool_frozen", "inline_frozen"):
                    result[mode]["gc"]["frozen"] = frozen
            finally:
                gc.unfreeze()
        finally:
            loop.close()
    finally:
        host.close()
    return result


def in_a_fresh_interpreter(quick: bool = False, sessions: int = 1000) -> dict[str, Any]:
    """`measure` in a new Python process: the heap of an application that embeds
    wasmext and nothing else, not the heap of whoever calls this (run.py's harness
    keeps every earlier figure's hosts and servers alive, several times the objects
    a full collection must scan). Beside it, `harness_heap`: a full collection forced
    in the caller's own heap with the same sessions open, to show how the default
    figure grows with an application's heap."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "async.json"
        here = Path(__file__).resolve().parent
        path = os.pathsep.join([str(here.parent / "host"), str(here.parent / "cli"),
                                os.environ.get("PYTHONPATH", "")])
        subprocess.run([sys.executable, str(here / "bench_async.py"), "--json", str(out),
                        "--sessions", str(sessions), *(["--quick"] if quick else [])],
                       check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONPATH": path.rstrip(os.pathsep)})
        result: dict[str, Any] = json.loads(out.read_text())
    result["process"] = "fresh"
    result["harness_heap"] = harness_heap(sessions)
    return result


def harness_heap(sessions: int = 1000) -> dict[str, Any]:
    """A full collection forced in this process's heap with `sessions` sessions open."""
    host = make_host((_noop(), {"plugin_id": "noop"}))
    try:
        inline_ms = (worst_case_ms(host, "on_plain_text") or 0.0) + 1
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(_peak_collection(host, sessions, inline_ms))
        finally:
            loop.close()
    finally:
        host.close()


def _watched(loop: asyncio.AbstractEventLoop, where: bool, run: Any) -> dict[str, Any]:
    # Not collected first: a mode inherits the collector's state from the one before,
    # as an application's work does, so a full collection lands where it would.
    tracked = len(gc.get_objects())
    collections = Collections()
    watch = Where()
    with collections.counting(), watch.watching(loop) if where else contextlib.nullcontext():
        figures: dict[str, Any] = loop.run_until_complete(run)
    figures["gc"] = collections.summary()
    figures["gc"]["tracked"] = tracked
    if where:
        figures["where"] = watch.summary()
    return figures


def spread(results: list[dict[str, Any]]) -> dict[str, Any]:
    """min / median / max of each figure over several `measure` results."""
    def three(values: list[float]) -> list[float]:
        return [min(values), round(statistics.median(values), 2), max(values)]
    out: dict[str, Any] = {"rounds": len(results), "sessions": results[0]["sessions"],
                           "calls_per_session": results[0]["calls_per_session"]}
    out["floor"] = three([r["floor"]["worst_gap_ms"] for r in results])
    out["busy_threads_floor"] = three([r["busy_threads_floor"]["worst_gap_ms"]
                                       for r in results])
    for mode in MODES:
        out[mode] = {key: three([r[mode][key] for r in results])
                     for key in ("worst_gap_ms", "p99_gap_ms", "calls_per_s")}
        out[mode]["gc_worst_cpu_ms"] = three([r[mode]["gc"]["worst_cpu_ms"] for r in results])
        out[mode]["gc_full"] = three([r[mode]["gc"]["full"] for r in results])
    for key in ("peak_collection", "peak_collection_frozen"):
        out[key] = three([r[key]["cpu_ms_min"] for r in results])
    return out


def report(result: dict[str, Any]) -> str:
    """The section's lines for run.py's report."""
    lines = [f"{result['sessions']} concurrent async sessions x "
             f"{result['calls_per_session']} hooks: worst event-loop gap (target <= 20 ms)"]
    floor = result["floor"]["worst_gap_ms"]
    busy = result["busy_threads_floor"]
    lines.append(f"  floor (tasks awaiting sleep(0))  {floor:>8} ms")
    lines.append(f"  floor ({busy['threads']} busy Python threads)     "
                 f"{busy['worst_gap_ms']:>8} ms")
    for key, what in (("peak_collection", "default"),
                      ("peak_collection_frozen", "after wasmext.tune_gc()")):
        peak = result[key]
        lines.append(f"  a full collection with {result['sessions']} sessions open, {what}: "
                     f"{peak['cpu_ms_min']} ms CPU (median {peak['cpu_ms_median']}), "
                     f"{peak['scanned']} objects scanned")
    if "harness_heap" in result:
        peak = result["harness_heap"]
        lines.append(f"  the same in the benchmark harness's own heap: {peak['cpu_ms_min']} ms CPU "
                     f"(median {peak['cpu_ms_median']}), {peak['scanned']} objects scanned "
                     "(the modes below ran in a fresh interpreter: an application's heap "
                     "adds to a default full collection in proportion)")
    for mode in MODES:
        r = result[mode]
        mark = "PASS" if r["worst_gap_ms"] <= 20 else "FAIL"
        collected = r["gc"]
        lines.append(f"  {LABELS[mode]:32} {r['worst_gap_ms']:>8} ms  p99 {r['p99_gap_ms']} ms  "
                     f"{r['calls_per_s']} hooks/s  {mark}  "
                     f"{r['worst_gap_ms'] / max(busy['worst_gap_ms'], 0.01):.2f}x the "
                     f"busy-threads floor; {collected['full']} full collections, longest "
                     f"{collected['worst_wall_ms']} ms ({collected['worst_cpu_ms']} ms CPU); "
                     f"{collected['tracked']} objects tracked at the start"
                     + (f", {collected['frozen']} frozen" if "frozen" in collected else ""))
    return "\n".join(lines)


def _where_lines(where: dict[str, Any]) -> list[str]:
    lines = [f"    loop work {where['work_wall_ms']} ms wall, {where['work_cpu_ms']} ms on "
             f"the CPU, {where['iterations']} iterations"]
    lines.append("    worst stretches between selects (wall ms, CPU ms): "
                 + ", ".join(f"{w}/{c}" for w, c in where["worst_stretches"]))
    lines.append(f"    {where['late_select_count']} selects late by over 2 ms; worst "
                 "(late ms, timeout ms): "
                 + ", ".join(f"{late}/{t}" for late, t in where["late_selects"]))
    lines.append(f"    {where['slow_handle_count']} handles over 2 ms; worst:")
    lines.extend(f"      {ms:>8} ms  {what}" for ms, what in where["slow_handles"])
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--where", action="store_true",
                    help="also say where the loop was held (slow handles, late selects)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat and report min / median / max of each figure")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    results = []
    for _ in range(max(1, args.rounds)):
        result = measure(args.quick, args.sessions, args.where)
        results.append(result)
        print(report(result))
        for mode in ("pool", "inline") if args.where else ():
            print(f"  where the loop was held, {mode}:")
            print("\n".join(_where_lines(result[mode]["where"])))
    doc: Any = results[0]
    if len(results) > 1:
        doc = {"spread": spread(results), "runs": results}
        s = doc["spread"]
        print(f"over {s['rounds']} rounds (min / median / max):")
        print(f"  floor (sleep(0) tasks)  {s['floor']} ms; one busy thread "
              f"{s['busy_threads_floor']} ms")
        for mode in MODES:
            m = s[mode]
            print(f"  {mode:13} worst gap {m['worst_gap_ms']} ms, p99 {m['p99_gap_ms']} ms, "
                  f"hooks/s {m['calls_per_s']}, longest full collection "
                  f"{m['gc_worst_cpu_ms']} ms CPU, full collections {m['gc_full']}")
        print(f"  a full collection with every session open: {s['peak_collection']} ms CPU; "
              f"after tune_gc() {s['peak_collection_frozen']} ms")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
