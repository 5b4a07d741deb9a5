"""The call tree: everything a plugin's call causes draws from that call's budget.

A plugin call that runs while another plugin's host call is in progress on the
same thread (`tool.call` into a plugin tool, an event delivered inline, ...)
is a nested call. It never outlives its caller: its deadline is the earlier of
its own `timeout_ms` and what is left of the caller's wall clock and host-call
time, and its host calls count against the caller's `max_host_calls` as well.

Each thread keeps one stack of frames, one per plugin call in progress; a
frame also names the guest that is running (`guest`), which is how an import
function finds its instance (`hostlink`): one thread-local lookup per call. The
innermost frame's `deadline` (monotonic seconds) bounds everything the host
does on the guest's behalf; `remaining()` tells a host tool, an MCP call or a
nested instance how long it may take. `detached()` starts a new tree;
`resumed(frame)` goes back to the tree a middleware chain began in: `next`
runs the host's own inner layers of the application's call in a new tree (the
layer is not charged for them), and those of a plugin's `tool.call` in that
plugin's tree (the plugin is). `run_bounded` runs a host function in a worker
thread for at most the time left; on time-out the worker is left to finish
on its own (Python threads cannot be killed) while the caller goes on.
The worker runs in a copy of the caller's context variables, so what travels
in them (the chain of agent runs, `services.agents`) crosses the hop too.

`tree_state(key, make)` is what a service keeps for the whole tree (the root
frame holds it): the agent runs a root call has left, for one.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, TypeVar

from wasmext.errors import OutOfTime

__all__ = ["Frame", "OutOfTime", "carry", "current", "detached", "remaining", "resumed",
           "run_bounded", "tree_state"]

T = TypeVar("T")


class Frame:
    """One plugin call in progress: its deadline, its host calls left, its guest."""

    __slots__ = ("calls_left", "clamped", "deadline", "guest", "logged", "once", "parent",
                 "state")

    def __init__(self, deadline: float, calls_left: int, parent: Frame | None,
                 guest: Any = None) -> None:
        self.deadline = deadline
        self.calls_left = calls_left
        self.parent = parent
        self.guest = guest  # the instance running this call (for its import functions)
        self.clamped = False  # the deadline is the caller's, not this call's own
        self.state: dict[str, Any] | None = None  # a root frame's `tree_state`, made on use
        self.logged = 0  # log lines this call wrote (`pluginlog` caps them per call)
        # A root frame's idempotency record: the state commit of the call it roots is
        # made at most once per key (`services.state.Once`); None: no such rule.
        self.once: Any = None


def enter(now: float, timeout_s: float, max_calls: int, guest: Any = None) -> Frame:
    """Open the frame of `guest`'s call starting `now`, clamped to its caller's."""
    stack = _tree.stack
    parent = stack[-1] if stack else None
    if parent is None:
        frame = Frame(now + timeout_s, max_calls, None, guest)
    else:
        # Conditionals, not min(): every nested or budgeted call passes here.
        own = now + timeout_s
        clamped = parent.deadline < own
        frame = Frame(parent.deadline if clamped else own,
                      max_calls if max_calls < parent.calls_left else parent.calls_left,
                      parent, guest)
        frame.clamped = clamped
    stack.append(frame)
    return frame


def leave(frame: Frame) -> None:
    """Close `frame`; the caller has spent the host calls it used."""
    _tree.stack.pop()
    parent = frame.parent
    if parent is not None and frame.calls_left < parent.calls_left:
        parent.calls_left = frame.calls_left


class _Tree(threading.local):
    def __init__(self) -> None:
        self.stack: list[Frame | None] = []


_tree = _Tree()


def current() -> Frame | None:
    """The innermost plugin call on this thread (None: no plugin is calling)."""
    stack = _tree.stack
    return stack[-1] if stack else None


def push(frame: Frame | None) -> None:
    """Push a frame (None: no plugin is calling) on this thread's call stack."""
    _tree.stack.append(frame)


def pop() -> None:
    """Pop this thread's innermost frame."""
    _tree.stack.pop()


def remaining() -> float | None:
    """Seconds left to the innermost call's deadline (None outside a plugin call)."""
    frame = current()
    return None if frame is None else frame.deadline - time.monotonic()


def tree_state(key: str, make: Callable[[], T]) -> T | None:
    """What the current call tree keeps under `key` (`make()` on first use); None outside
    a plugin call. Every frame of the tree, on any thread, finds the same object."""
    frame = current()
    if frame is None:
        return None
    while frame.parent is not None:
        frame = frame.parent
    if frame.state is None:
        frame.state = {}
    if key not in frame.state:
        frame.state[key] = make()
    return frame.state[key]  # type: ignore[no-any-return]


@contextmanager
def detached() -> Iterator[None]:
    """Run the block as a new tree (the host's own work, not the caller's)."""
    _tree.stack.append(None)
    try:
        yield
    finally:
        _tree.stack.pop()


@contextmanager
def resumed(outer: Frame | None) -> Iterator[None]:
    """Run the block in `outer`'s tree (None: a new tree, as `detached`).

    A middleware `next` runs the inner layers in the tree the chain began in: the
    host's own (None) for the application's call, the calling plugin's for its
    `tool.call`, so what the inner layers and the tool spend is that plugin's. The host
    calls the current frame (the layer asking) has spent count against `outer` before
    the block, and what the block spent counts against the current frame after it.
    """
    asking = current()
    if outer is not None and asking is not None and asking.calls_left < outer.calls_left:
        outer.calls_left = asking.calls_left
    _tree.stack.append(outer)
    try:
        yield
    finally:
        _tree.stack.pop()
        if outer is not None and asking is not None and outer.calls_left < asking.calls_left:
            asking.calls_left = outer.calls_left


# What else of the calling thread a bounded worker takes along: each capture runs on
# the caller's thread and returns a context manager entered on the worker's (or None).
# callscope registers one, so that a cancel reaches what the worker calls.
Carrier = Callable[[], AbstractContextManager[Any]]
_carriers: list[Callable[[], Carrier | None]] = []


def carry(capture: Callable[[], Carrier | None]) -> None:
    """Have `run_bounded` workers enter what `capture()` gives on the calling thread."""
    _carriers.append(capture)


def run_bounded(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, in a worker thread when a call tree bounds this thread.

    Raises OutOfTime when the tree's deadline passes first; the worker keeps
    the tree's frame, so whatever it calls is bounded by the same deadline.
    """
    frame = current()
    if frame is None:
        return fn(*args)
    left = frame.deadline - time.monotonic()
    if left <= 0:
        raise OutOfTime("the calling plugin's time is up")
    box: dict[str, Any] = {}
    carried = [c for capture in _carriers if (c := capture()) is not None]

    def work() -> None:
        _tree.stack.append(frame)
        try:
            with ExitStack() as entered:
                for carry in carried:
                    entered.enter_context(carry())
                box["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            _tree.stack.pop()

    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(work,), name="wasmext-host-tool",
                              daemon=True)
    worker.start()
    worker.join(left)
    if worker.is_alive():
        raise OutOfTime(f"no answer within the {left * 1000:.0f} ms the caller had left")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
