"""The at-scale benchmarks run end to end: the event-loop gap of many async sessions
beside its floors, and the log flood beside the cap it is held to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # benchmark-sized runs

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}


def _run(tmp_path: Path, script: str, *args: str) -> tuple[dict[str, object], str]:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick",
                           "--json", str(out), *args], capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout


def test_the_async_benchmark_reports_the_worst_gap_of_each_mode_and_its_floors(
        tmp_path: Path) -> None:
    doc, text = _run(tmp_path, "bench_async.py", "--sessions", "200")
    modes = ("pool", "inline", "pool_frozen", "inline_frozen")
    for key in ("floor", "busy_threads_floor", *modes):
        assert doc[key]["worst_gap_ms"] >= 0, key  # type: ignore[index]
    for mode in modes:
        assert doc[mode]["calls_per_s"] > 0  # type: ignore[index]
        collected = doc[mode]["gc"]  # type: ignore[index]
        assert collected["full"] >= 0 and collected["worst_cpu_ms"] >= 0  # type: ignore[index]
        assert collected["tracked"] > 0  # type: ignore[index]
    # tune_gc froze the start-up heap: the frozen modes start with far fewer tracked.
    for mode in ("pool_frozen", "inline_frozen"):
        frozen = doc[mode]["gc"]  # type: ignore[index]
        assert frozen["frozen"] > frozen["tracked"]  # type: ignore[index]
    assert "worst event-loop gap" in text and "busy-threads floor" in text
    assert "full collections" in text and "after wasmext.tune_gc()" in text
    # A full collection forced with every session open scans the start-up heap by
    # default, and only what was made since after tune_gc().
    default, tuned = doc["peak_collection"], doc["peak_collection_frozen"]  # type: ignore[index]
    assert tuned["scanned"] < default["scanned"] // 4  # type: ignore[index]
    assert "a full collection with 200 sessions open" in text
    assert gc_is_thawed_after_the_benchmark()


def test_run_py_times_the_gap_in_a_fresh_interpreter_beside_its_own_heap() -> None:
    """run.py's harness keeps every earlier figure's hosts alive: the async section is
    timed in a new process, and a collection in the harness's heap is shown beside it."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_async
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    ballast = [[i] for i in range(200_000)]  # a heap larger than a fresh interpreter's
    doc = bench_async.in_a_fresh_interpreter(quick=True, sessions=50)
    assert doc["process"] == "fresh" and doc["sessions"] == 50
    assert doc["pool"]["gc"]["tracked"] < len(ballast)
    assert doc["harness_heap"]["scanned"] > doc["peak_collection"]["scanned"] + len(ballast)
    assert "the benchmark harness's own heap" in bench_async.report(doc)


def gc_is_thawed_after_the_benchmark() -> bool:
    """The benchmark freezes the heap for its frozen modes and thaws it after."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_async
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    import gc
    bench_async.measure(quick=True, sessions=20)
    return gc.get_freeze_count() == 0


def test_the_flood_benchmark_shows_the_cap_holding(tmp_path: Path) -> None:
    doc, text = _run(tmp_path, "bench_flood.py")
    assert doc["lines_kept"] == 1000
    # Every line over the cap in every flood call was counted, none kept.
    assert doc["lines_capped"] == doc["rounds"] * (doc["lines_per_call"] - 1000)  # type: ignore[operator]
    assert "dropped over the cap" in text
