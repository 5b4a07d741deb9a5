"""The asyncio event loop wasmext makes for itself: asyncio's own, or uvloop on request.

A NATS worker's loop turns at least once for every read of its socket, and a turn of
asyncio's default loop is Python (the selector, the ready queue, the transport's
callbacks); uvloop runs it in C on libuv. A worker answering one request at a time
spent 23 % fewer instructions per request on uvloop, a few percent at 16 in flight
(docs/performance.md, "The worker on uvloop"). It is not the default: a crash in
native code takes the whole process with it, uvloop has open reports of segmentation
faults, and in the first full test run with every link's thread on uvloop one test
process died of one (cause not found). The `nats` extra installs it on CPython outside
Windows, for those who choose it.

What runs on the loop made here: `wasmext worker` (its `--loop` option), the thread a
`NatsLink` made for synchronous callers (`Router.run`, `wasmext run --nats`), and the
thread of the JetStream state store. Never the application's own loop: `Router.arun`
and `NatsLink.open` run on whatever loop awaits them.

`WASMEXT_EVENT_LOOP` chooses for a process: `asyncio` (the default) or `uvloop`
(refused when it is not installed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from wasmext.errors import ConfigError
from wasmext.text import clean

__all__ = ["EVENT_LOOPS", "EVENT_LOOP_ENV", "loop_factory", "loop_name", "new_event_loop",
           "run_on", "stop_in_thread"]

EVENT_LOOPS = ("asyncio", "uvloop")
EVENT_LOOP_ENV = "WASMEXT_EVENT_LOOP"

T = TypeVar("T")


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop of `choice` (None: `WASMEXT_EVENT_LOOP`, else `asyncio`);
    ConfigError for an unknown choice, or for `uvloop` where it is not installed."""
    if choice is None:
        choice = os.environ.get(EVENT_LOOP_ENV, "").strip().lower() or "asyncio"
    if choice not in EVENT_LOOPS:
        raise ConfigError(f"event loop {clean(choice, 40)!r} is not one of "
                          f"{', '.join(EVENT_LOOPS)} ({EVENT_LOOP_ENV} or --loop)")
    if choice == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        raise ConfigError("event loop uvloop is not installed: pip install "
                          "'wasmext[nats]' (CPython on Linux or macOS), or choose "
                          "asyncio") from None
    return uvloop.new_event_loop


def new_event_loop(choice: str | None = None) -> asyncio.AbstractEventLoop:
    """A new loop of `choice` (`loop_factory`)."""
    return loop_factory(choice)()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` or `asyncio`: which kind of loop `loop` is, for a log line."""
    return "uvloop" if type(loop).__module__.partition(".")[0] == "uvloop" else "asyncio"


def run_on(factory: Callable[[], asyncio.AbstractEventLoop],
           main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on a loop `factory` makes (from `loop_factory`)."""
    if factory is asyncio.new_event_loop:
        return asyncio.run(main)
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
    import uvloop  # the only other factory `loop_factory` gives

    return uvloop.run(main)


def stop_in_thread(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """Stop `loop`, running for ever in `thread` (a link's or a store's), and close it.
    What is still on it first ends on it: a connection whose drain failed (a server
    already gone, a drain past its time) leaves its subscriptions' and flusher's tasks
    pending, and the garbage collector closing them after the loop is closed raises
    "Event loop is closed" from their `finally`."""
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(_end_tasks(), loop).result(2.0)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5.0)
    loop.close()


async def _end_tasks() -> None:
    """Cancel every other task of the running loop and wait (a second at most) for them."""
    me = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not me]
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=1.0)
