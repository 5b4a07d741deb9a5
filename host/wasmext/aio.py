"""asyncio: plugin calls run in wasmext's own worker threads, off the event loop.

    async with host.asession() as s:
        text = (await s.on_plain_text("hi")).value

Plugins are pooled per call, so concurrent tasks (each in its own thread)
never share an instance. The workers are a dedicated pool (`wasmext-call-*`):
a burst of plugin calls never waits behind the application's own
`to_thread` work in the loop's default executor, nor the other way round.

`host.asession(inline_below_ms=N)` runs a transform hook (`on_plain_text`,
`on_llm_output`, `on_input_messages`) on the event loop itself
when the sum of its plugins' `timeout_ms` is below N: the hook can then block
the loop for at most N ms, and saves the thread hop (which costs several
times a cheap hook call). Off (0) by default.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from wasmext.session import Session, SessionHost

if TYPE_CHECKING:
    from wasmext.hooks.extensions import ExtensionResult, Prompt, ToolGuidance
    from wasmext.hooks.lifecycle import LifecycleResult
    from wasmext.hooks.pipeline import PipelineResult
    from wasmext.hooks.transform import TransformResult

__all__ = ["AsyncSession", "asession"]

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The process's pool for plugin calls (threads start on demand, as calls need them)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4),
                                       thread_name_prefix="wasmext-call")
        return _pool


class AsyncSession:
    """The async face of a Session: same methods, awaited."""

    def __init__(self, session: Session, inline_below_ms: float = 0.0) -> None:
        self.sync = session
        self.id = session.id
        self.trace = session.trace
        self.inline_below_ms = inline_below_ms

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(fn, *args, **kwargs) if kwargs else fn
        return await asyncio.get_running_loop().run_in_executor(_executor(), call, *(
            () if kwargs else args))

    def _inline(self, hook: str) -> bool:
        """May `hook` run on the loop: is its worst case below the threshold?"""
        if self.inline_below_ms <= 0:
            return False
        host = self.sync.host
        worst = 0
        for entry in host.ordered(hook):
            lp = host.plugins.get(entry.plugin_id)
            if lp is None:
                continue
            worst += lp.plugin.limits.timeout_ms
            if worst >= self.inline_below_ms:
                return False
        return True

    async def _transform(self, hook: str, fn: Callable[[Any], Any], value: Any) -> Any:
        if self._inline(hook):
            return fn(value)
        return await self._run(fn, value)

    async def on_input_messages(self, messages: Any) -> TransformResult:
        return await self._transform(  # type: ignore[no-any-return]
            "on_input_messages", self.sync.on_input_messages, messages)

    async def on_plain_text(self, text: str) -> TransformResult:
        return await self._transform(  # type: ignore[no-any-return]
            "on_plain_text", self.sync.on_plain_text, text)

    async def on_llm_output(self, text: str) -> TransformResult:
        return await self._transform(  # type: ignore[no-any-return]
            "on_llm_output", self.sync.on_llm_output, text)

    async def process_tags(self, text: str) -> str:
        return await self._run(self.sync.process_tags, text)  # type: ignore[no-any-return]

    async def middleware(self, kind: str, data: dict[str, Any],
                         core: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        return await self._run(self.sync.middleware, kind, data, core)  # type: ignore[no-any-return]

    async def lifecycle(self, event: str, **fields: Any) -> LifecycleResult:
        return await self._run(self.sync.lifecycle, event, **fields)  # type: ignore[no-any-return]

    async def pipeline(self, *args: Any, **kwargs: Any) -> PipelineResult:
        return await self._run(self.sync.pipeline, *args, **kwargs)  # type: ignore[no-any-return]

    async def output_extensions(self, query: str, answer: str
                                ) -> tuple[str, list[ExtensionResult]]:
        return await self._run(self.sync.output_extensions, query, answer)  # type: ignore[no-any-return]

    async def prompt(self, *args: Any, **kwargs: Any) -> Prompt:
        return await self._run(self.sync.prompt, *args, **kwargs)  # type: ignore[no-any-return]

    async def tool_guidance(self, tools: list[str]) -> ToolGuidance:
        return await self._run(self.sync.tool_guidance, tools)  # type: ignore[no-any-return]


@asynccontextmanager
async def asession(host: SessionHost, session_id: str | None = None,
                   state: Mapping[str, Any] | None = None,
                   inline_below_ms: float = 0.0) -> AsyncIterator[AsyncSession]:
    s = Session(host, session_id or uuid.uuid4().hex, dict(state or {}))
    a = AsyncSession(s, inline_below_ms)
    await a._run(s.start)
    try:
        yield a
    finally:
        await a._run(s.end)
