"""An application's opt-in: leave its start-up heap out of CPython's garbage collections.

    host = Host(...)          # imports done, plugins loaded
    wasmext.tune_gc(host)     # once, after start-up

CPython's full (generation 2) collection scans every object the collector
tracks, and it runs on whichever thread happens to allocate. A process that has
imported wasmext, wasmtime and pydantic and built a `Host` tracks about 55,000
objects that live as long as the process (functions, classes, module tables,
validators); a full collection over them and 1,000 open sessions took 12-15 ms of
CPU (up to 38 ms inside a busy run), all of it on the event loop's thread when hooks
run inline (docs/performance.md, "Async gap and llm.complete, sixth round").
`tune_gc` collects once and then moves every object still alive into the permanent
generation (`gc.freeze()`): later collections scan only what was made after it,
under a millisecond where the full one took tens.

What is frozen is never collected: a cycle among frozen objects that becomes
garbage stays in memory. So call it after start-up, not after work that leaves such
cycles behind; given the host, it thaws, collects and freezes again after the host
loads a plugin (a rescan or `--watch` replacing one, `wasmext enable`), so what the
replaced plugin left in cycles is freed then. A plugin unloaded for good is not
followed by a collection of its own (closing a host unloads every plugin, and a full
collection at exit helps nobody): its cycles wait for the next load.
`gc.unfreeze()` undoes it.

A library cannot know when its application's start-up is over, so wasmext never
does this by itself; the `wasmext` commands do (`[host] gc_freeze`, default on).
"""

from __future__ import annotations

import gc
import time
from typing import Any

__all__ = ["tune_gc"]

RETUNE_TOPIC = "plugin.loaded"


def _freeze() -> int:
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class _Retune:
    """Thaw, collect and freeze again after a plugin is loaded. Events come one at a time
    (one subscription); one emitted before the last re-tune began is covered by it, so a
    rescan of many plugins costs a collection or two, not one per plugin."""

    def __init__(self) -> None:
        self._since = 0.0  # when the last re-tune began (the events' clock, time.time())

    def __call__(self, event: Any) -> None:
        if event.time < self._since:
            return
        self._since = time.time()
        gc.unfreeze()
        _freeze()


def tune_gc(host: Any = None) -> int:
    """Collect once, then freeze everything alive out of later collections (and, given
    `host`, again whenever it loads a plugin); returns how many objects are now frozen."""
    frozen = _freeze()
    if host is not None:
        host.observe.bus.subscribe(RETUNE_TOPIC, _Retune(), name="wasmext.tune_gc")
    return frozen
