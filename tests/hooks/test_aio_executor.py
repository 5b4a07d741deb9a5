"""Awaited hooks run in wasmext's own worker pool, or inline below a stated budget."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from wasmext.testing import guest_wat, make_host

NOOP = guest_wat(hooks=("on_plain_text",), response={"ok": True})


def _thread_of_call(host: Any, inline_below_ms: float) -> str:
    seen: list[str] = []

    async def main() -> str:
        async with host.asession(inline_below_ms=inline_below_ms) as s:
            sync_call = s.sync.on_plain_text

            def recorded(text: str) -> Any:
                seen.append(threading.current_thread().name)
                return sync_call(text)

            s.sync.on_plain_text = recorded
            assert (await s.on_plain_text("hi")).value == "hi"
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    return "loop" if seen == [loop_thread] else seen[0]


def test_calls_run_in_the_dedicated_pool_by_default() -> None:
    with make_host((NOOP, {"limits": {"timeout_ms": 50}})) as host:
        assert _thread_of_call(host, 0).startswith("wasmext-call")


def test_a_hook_whose_budget_is_below_the_threshold_runs_inline() -> None:
    with make_host((NOOP, {"limits": {"timeout_ms": 50}})) as host:
        assert _thread_of_call(host, 100) == "loop"
        assert _thread_of_call(host, 50).startswith("wasmext-call")  # not below: a thread


def test_the_budget_is_the_sum_over_the_chain() -> None:
    with make_host((NOOP, {"limits": {"timeout_ms": 40}}),
                   (NOOP, {"limits": {"timeout_ms": 40}})) as host:
        assert _thread_of_call(host, 60).startswith("wasmext-call")
        assert _thread_of_call(host, 81) == "loop"


def test_other_methods_take_keyword_arguments_through_the_pool() -> None:
    with make_host(guest_wat(hooks=("before_tool",), response={"ok": True})) as host:
        async def main() -> Any:
            async with host.asession(inline_below_ms=10_000) as s:
                return await s.lifecycle("before_tool", tool_name="calc", args={})

        assert asyncio.run(main()).proceed
