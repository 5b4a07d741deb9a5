"""Timing: one `perf_counter_ns` pair around every call, many calls, rounds interleaved.

The machines this runs on have two cores and are usually busy, so a figure
taken in one block of time can be skewed by whatever else ran then. Every
case is therefore measured in `rounds` slices, and the rounds go round-robin
over all cases: background load lands on every case alike, which keeps the
ratios between cases honest even when the absolute numbers move. The
garbage collector is off inside each timed slice (and run between slices),
so that a collection triggered by one case is never billed to another.
What `fn` returns is released after the second timestamp, so a fresh
instance's figure is the time to make it, not to make and drop it.
"""

from __future__ import annotations

import gc
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Case", "Skipped", "Stats", "run_interleaved", "stats_of"]


@dataclass
class Case:
    """One figure: `fn` is called `iters` times (after `warmup` untimed calls)."""

    key: str
    label: str
    group: str
    fn: Callable[[], Any]
    iters: int
    warmup: int
    before_round: Callable[[], Any] | None = None
    note: str = ""
    samples: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Skipped:
    """A figure that could not be measured, and why."""

    key: str
    label: str
    group: str
    reason: str


@dataclass(frozen=True)
class Stats:
    n: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    min_us: float
    max_us: float

    def as_dict(self) -> dict[str, float | int]:
        return {"n": self.n, "p50_us": round(self.p50_us, 3), "p90_us": round(self.p90_us, 3),
                "p99_us": round(self.p99_us, 3), "mean_us": round(self.mean_us, 3),
                "min_us": round(self.min_us, 3), "max_us": round(self.max_us, 3)}


def _rank(sorted_ns: list[int], q: float) -> float:
    """The nearest-rank percentile `q` (0..1) of sorted samples."""
    idx = max(0, min(len(sorted_ns) - 1, math.ceil(q * len(sorted_ns)) - 1))
    return float(sorted_ns[idx])


def stats_of(samples_ns: list[int]) -> Stats:
    s = sorted(samples_ns)
    us = 1000.0
    return Stats(n=len(s), p50_us=_rank(s, 0.50) / us, p90_us=_rank(s, 0.90) / us,
                 p99_us=_rank(s, 0.99) / us, mean_us=sum(s) / len(s) / us,
                 min_us=s[0] / us, max_us=s[-1] / us)


def _timed_slice(fn: Callable[[], Any], n: int, out: list[int]) -> None:
    clock = time.perf_counter_ns
    append = out.append
    keep: list[Any] = [None]
    for _ in range(n):
        t0 = clock()
        keep[0] = fn()
        t1 = clock()
        keep[0] = None  # released after the second timestamp: dropping is not timed
        append(t1 - t0)


def run_interleaved(cases: list[Case], rounds: int, *, verbose: bool = True) -> None:
    """Warm every case up, then time `rounds` round-robin slices of each."""
    for case in cases:
        if case.before_round is not None:
            case.before_round()
        for _ in range(case.warmup):
            case.fn()
    for r in range(rounds):
        started = time.perf_counter()
        for case in cases:
            per_round = case.iters // rounds + (1 if r < case.iters % rounds else 0)
            if case.before_round is not None:
                case.before_round()
            gc.collect()
            gc.disable()
            try:
                _timed_slice(case.fn, per_round, case.samples)
            finally:
                gc.enable()
        if verbose:
            print(f"  round {r + 1}/{rounds} done in {time.perf_counter() - started:.1f} s",
                  file=sys.stderr, flush=True)
    gc.collect()
