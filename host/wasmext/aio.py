"""asyncio: awaited plugin calls never block the event loop for longer than a stated bound.

    async with host.asession() as s:
        text = (await s.on_plain_text("hi")).value

Each awaited hook either runs on the event loop itself (inline) or in one of
wasmext's own worker threads (`wasmext-call-*`, see `wasmext.callpool`), one
thread hop for the whole chain of plugins of that hook.

Inline: a transform hook (`on_plain_text`, `on_llm_output`, `on_input_messages`)
or a lifecycle event runs on the loop when its worst case is below
`inline_below_ms` (default `INLINE_BELOW_MS`, 50 ms; 0 turns inline off). The
worst case of a chain is the sum, over its plugins, of `timeout_ms` plus
`DEADLINE_SLACK_MS` (10 ms: the wall-clock deadline is checked on 5 ms epoch
ticks, so a call that spins ends at most two ticks after its timeout). A hook
with no plugins has a worst case of 0 and costs no hop at all (entering a
session runs `session_start` the same way; leaving it always takes a thread,
for the state store's I/O). Fuel does not count: how long a unit of fuel
takes depends on the machine, and host calls use none. A chain with a
plugin granted `tools`, `llm` or `agents` never runs inline: those ops run
application code, which may wait on this very loop.

Inline calls also share the loop: one iteration of the loop runs inline hooks for
at most `callpool.SLICE_S` (4 ms) in all, counted with the answers handed back
from worker threads; past that, a hook that could run inline waits for the loop's
next turn (first come, first served) and runs on the loop then, so 1,000 sessions
awaiting at once never hold the loop for the sum of their hooks. It does not hop
to the pool instead: a worker thread running Python beside the loop takes the GIL
from it whenever an inline guest call gives it up (each call into wasmtime does),
and getting it back cost the loop a switch interval (5 ms) or several.

Otherwise the hook runs in a worker thread, which costs a thread hop (several
times a cheap hook call, docs/performance.md): pass a larger `inline_below_ms`
to trade the loop's worst-case latency for that hop, or 0 to keep every
plugin call off the loop. Plugins are pooled per call, so concurrent tasks
never share an instance either way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from wasmext.callpool import LoopShare, call_pool, share_of
from wasmext.hooks.lifecycle import EVENTS
from wasmext.ids import random_hex
from wasmext.sandbox.engine import TICK_MS
from wasmext.session import Session, SessionHost

if TYPE_CHECKING:
    from wasmext.hooks.context import HookHost
    from wasmext.hooks.extensions import ExtensionResult, Prompt, ToolGuidance
    from wasmext.hooks.lifecycle import LifecycleResult
    from wasmext.hooks.pipeline import PipelineResult
    from wasmext.hooks.transform import TransformResult

__all__ = ["DEADLINE_SLACK_MS", "INLINE_BELOW_MS", "AsyncSession", "asession",
           "worst_case_ms"]

INLINE_BELOW_MS = 50.0  # half of asyncio's own "slow callback" mark (debug mode, 100 ms)
DEADLINE_SLACK_MS = 2 * TICK_MS
# Grants whose ops call back into the application (tools, the llm callable, agents).
APP_GRANTS = frozenset({"tools", "llm", "agents"})


def worst_case_ms(host: HookHost, hook: str) -> float | None:
    """How long the chain of `hook` may run, at most; None: it may run application code."""
    total = 0.0
    plugins = host.plugins
    for entry in host.ordered(hook):
        lp = plugins.get(entry.plugin_id)
        if lp is None:
            continue
        plugin = lp.plugin
        if not APP_GRANTS.isdisjoint(plugin.grants):
            return None
        total += plugin.limits.timeout_ms + DEADLINE_SLACK_MS
    return total


def _ends_without_io(host: SessionHost) -> bool:
    """Whether ending a session can touch no state store: none is open, and no
    session_end plugin may open one (they hold no `state` grant)."""
    if host.keeps_session_state():
        return False
    plugins = host.plugins
    for entry in host.ordered("session_end"):
        lp = plugins.get(entry.plugin_id)
        if lp is not None and "state" in lp.plugin.grants:
            return False
    return True


class AsyncSession:
    """The async face of a Session: same methods, awaited."""

    def __init__(self, session: Session, inline_below_ms: float | None = None) -> None:
        self.sync = session
        self.id = session.id
        self.trace = session.trace
        self.inline_below_ms = INLINE_BELOW_MS if inline_below_ms is None else inline_below_ms
        self._share: LoopShare | None = None  # the share of `_loop`, looked up once
        self._loop: asyncio.AbstractEventLoop | None = None

    def _run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """`fn(*args)` in a worker thread: one hop, whatever `fn` calls."""
        return call_pool().submit(asyncio.get_running_loop(), fn, *args)

    def _inline(self, hook: str) -> LoopShare | None:
        """The loop's share if `hook` runs on the loop (its worst case is below the
        threshold), else None."""
        if self.inline_below_ms <= 0:
            return None
        worst = worst_case_ms(self.sync.host, hook)
        if worst is None or worst >= self.inline_below_ms:
            return None
        loop = asyncio.get_running_loop()
        share = self._share
        if share is None or self._loop is not loop:  # one lookup per session and loop
            share = self._share = share_of(loop)
            self._loop = loop
        return share

    @staticmethod
    def _on_loop(share: LoopShare, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the loop, its time charged to this iteration's slice."""
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            share.charge(time.perf_counter() - started)

    async def on_input_messages(self, messages: Any) -> TransformResult:
        """Session.on_input_messages, awaited (inline when its worst case is short)."""
        if share := self._inline("on_input_messages"):
            if not share.may_inline():
                await share.turn()
            return self._on_loop(share, self.sync.on_input_messages, messages)  # type: ignore[no-any-return]
        return await self._run(self.sync.on_input_messages, messages)  # type: ignore[no-any-return]

    async def on_plain_text(self, text: str) -> TransformResult:
        """Session.on_plain_text, awaited (inline when its worst case is short)."""
        if share := self._inline("on_plain_text"):
            if not share.may_inline():
                await share.turn()
            return self._on_loop(share, self.sync.on_plain_text, text)  # type: ignore[no-any-return]
        return await self._run(self.sync.on_plain_text, text)  # type: ignore[no-any-return]

    async def on_llm_output(self, text: str) -> TransformResult:
        """Session.on_llm_output, awaited (inline when its worst case is short)."""
        if share := self._inline("on_llm_output"):
            if not share.may_inline():
                await share.turn()
            return self._on_loop(share, self.sync.on_llm_output, text)  # type: ignore[no-any-return]
        return await self._run(self.sync.on_llm_output, text)  # type: ignore[no-any-return]

    async def process_tags(self, text: str) -> str:
        """Session.process_tags in a worker thread."""
        return await self._run(self.sync.process_tags, text)  # type: ignore[no-any-return]

    async def middleware(self, kind: str, data: dict[str, Any],
                         core: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Session.middleware in a worker thread."""
        return await self._run(self.sync.middleware, kind, data, core)  # type: ignore[no-any-return]

    async def lifecycle(self, event: str, **fields: Any) -> LifecycleResult:
        """Session.lifecycle, awaited (inline when its worst case is short)."""
        if event in EVENTS and (share := self._inline(event)):
            if not share.may_inline():
                await share.turn()
            return self._on_loop(  # type: ignore[no-any-return]
                share, lambda: self.sync.lifecycle(event, **fields))
        return await self._run(  # type: ignore[no-any-return]
            lambda: self.sync.lifecycle(event, **fields))

    async def pipeline(self, *args: Any, **kwargs: Any) -> PipelineResult:
        """Session.pipeline in a worker thread."""
        return await self._run(  # type: ignore[no-any-return]
            lambda: self.sync.pipeline(*args, **kwargs))

    async def output_extensions(self, query: str, answer: str,
                                context: Mapping[str, Any] | None = None
                                ) -> tuple[str, list[ExtensionResult]]:
        """Session.output_extensions in a worker thread."""
        return await self._run(self.sync.output_extensions, query, answer, context)  # type: ignore[no-any-return]

    async def prompt(self, *args: Any, **kwargs: Any) -> Prompt:
        """Session.prompt in a worker thread."""
        return await self._run(lambda: self.sync.prompt(*args, **kwargs))  # type: ignore[no-any-return]

    async def tool_guidance(self, tools: list[str]) -> ToolGuidance:
        """Session.tool_guidance in a worker thread."""
        return await self._run(self.sync.tool_guidance, tools)  # type: ignore[no-any-return]


class _SessionScope:
    """`async with asession(...)`: one object for the session's whole life. A class, not
    an `asynccontextmanager`: that keeps a generator, its frame and a wrapper alive per
    open session, three more objects for CPython's collector to scan (docs/embedding.md)."""

    __slots__ = ("_host", "_id", "_inline_below_ms", "_session", "_share", "_state")

    def __init__(self, host: SessionHost, session_id: str | None,
                 state: Mapping[str, Any] | None, inline_below_ms: float | None) -> None:
        self._host = host
        self._id = session_id
        self._state = state
        self._inline_below_ms = inline_below_ms
        self._share: LoopShare | None = None
        self._session: AsyncSession | None = None

    async def __aenter__(self) -> AsyncSession:
        share = self._share = share_of(asyncio.get_running_loop())
        await share.turn()  # 1,000 sessions entered at once: a slice of them per iteration
        started = time.perf_counter()
        s = Session(self._host, self._id or random_hex(), dict(self._state or {}))
        self._state = None
        a = AsyncSession(s, self._inline_below_ms)
        inline = a._inline("session_start") is not None
        if inline:  # plugins, and an event queued for the bus
            s.start()
        share.charge(time.perf_counter() - started)
        if not inline:
            await a._run(s.start)
        self._session = a
        return a

    async def __aexit__(self, *exc_info: object) -> None:
        a, share = self._session, self._share
        if a is None or share is None:
            return
        self._session = None
        s = a.sync
        # With a state store open, it drops the session's state: that I/O is off the
        # loop. Without one, ending is the session_end chain and an event: inline when
        # that chain may run inline, as `start` is (a hop per session kept a thousand
        # ending sessions' hops competing with the loop for the GIL).
        if _ends_without_io(self._host) and a._inline("session_end") is not None:
            await share.turn()
            started = time.perf_counter()
            try:
                s.end()
            finally:
                share.charge(time.perf_counter() - started)
        else:
            await a._run(s.end)


def asession(host: SessionHost, session_id: str | None = None,
             state: Mapping[str, Any] | None = None,
             inline_below_ms: float | None = None) -> AbstractAsyncContextManager[AsyncSession]:
    """A session whose hooks are awaited (`session_start` on entry, `session_end` on exit).

    `inline_below_ms` (default `INLINE_BELOW_MS`, 50 ms) bounds how long one
    awaited hook may block the event loop: a transform hook or lifecycle event
    whose `worst_case_ms` is below it runs on the loop, anything else in a
    worker thread (one hop per hook); 0 keeps every plugin call off the loop.
    """
    return _SessionScope(host, session_id, state, inline_below_ms)
