"""asyncio: every plugin call runs in a worker thread, never on the event loop.

    async with host.asession() as s:
        text = (await s.on_plain_text("hi")).value

Plugins are pooled per call, so concurrent tasks (each in its own thread)
never share an instance.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from wasmext.session import Session, SessionHost

if TYPE_CHECKING:
    from wasmext.hooks.extensions import ExtensionResult, Prompt, ToolGuidance
    from wasmext.hooks.lifecycle import LifecycleResult
    from wasmext.hooks.pipeline import PipelineResult
    from wasmext.hooks.transform import TransformResult

__all__ = ["AsyncSession", "asession"]


class AsyncSession:
    """The async face of a Session: same methods, awaited."""

    def __init__(self, session: Session) -> None:
        self.sync = session
        self.id = session.id
        self.trace = session.trace

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def on_input_messages(self, messages: Any) -> TransformResult:
        return await self._run(self.sync.on_input_messages, messages)  # type: ignore[no-any-return]

    async def on_plain_text(self, text: str) -> TransformResult:
        return await self._run(self.sync.on_plain_text, text)  # type: ignore[no-any-return]

    async def on_llm_output(self, text: str) -> TransformResult:
        return await self._run(self.sync.on_llm_output, text)  # type: ignore[no-any-return]

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
                   state: Mapping[str, Any] | None = None) -> AsyncIterator[AsyncSession]:
    s = Session(host, session_id or uuid.uuid4().hex, dict(state or {}))
    await asyncio.to_thread(s.start)
    try:
        yield AsyncSession(s)
    finally:
        await asyncio.to_thread(s.end)
