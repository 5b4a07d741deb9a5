"""An application's opt-in: leave its start-up heap out of CPython's garbage collections.

    host = Host(...)          # imports done, plugins loaded
    wasmext.tune_gc()         # once, after start-up

CPython's full (generation 2) collection scans every object the collector
tracks, and it runs on whichever thread happens to allocate. A process that has
imported wasmext, wasmtime and pydantic and built a `Host` tracks about 55,000
objects that live as long as the process (functions, classes, module tables,
validators); a full collection over them and 1,000 open sessions took 38 ms of
CPU, all of it on the event loop's thread when hooks run inline
(docs/performance.md, "Async gap and llm.complete, sixth round"). `tune_gc`
collects once and then moves every object still alive into the permanent
generation (`gc.freeze()`): later collections scan only what was made after it,
under a millisecond where the full one took tens.

A library cannot know when its application's start-up is over, so wasmext never
does this by itself; the `wasmext` commands do (`[host] gc_freeze`, default on).
What is frozen is never collected: a cycle among frozen objects that becomes
garbage later stays in memory. Call it after start-up, not after work that leaves
such cycles behind; `gc.unfreeze()` undoes it.
"""

from __future__ import annotations

import gc

__all__ = ["tune_gc"]


def tune_gc() -> int:
    """Collect once, then freeze everything alive out of later collections; returns how
    many objects are now frozen (`gc.get_freeze_count()`)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
