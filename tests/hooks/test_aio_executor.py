"""Awaited hooks run in wasmext's own worker pool, or inline below a stated worst case."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from wasmext.aio import DEADLINE_SLACK_MS, INLINE_BELOW_MS, worst_case_ms
from wasmext.testing import guest_wat, make_host

NOOP = guest_wat(hooks=("on_plain_text",), response={"ok": True})
UNSET = object()


def _thread_of_call(host: Any, inline_below_ms: Any = UNSET) -> str:
    seen: list[str] = []
    options = {} if inline_below_ms is UNSET else {"inline_below_ms": inline_below_ms}

    async def main() -> str:
        async with host.asession(**options) as s:
            sync_call = s.sync.on_plain_text

            def recorded(text: str) -> Any:
                seen.append(threading.current_thread().name)
                return sync_call(text)

            s.sync.on_plain_text = recorded
            assert (await s.on_plain_text("hi")).value == "hi"
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    return "loop" if seen == [loop_thread] else seen[0]


def test_calls_run_in_the_dedicated_pool_when_inline_is_off() -> None:
    with make_host((NOOP, {"limits": {"timeout_ms": 5}})) as host:
        assert _thread_of_call(host, 0).startswith("wasmext-call")


def test_a_hook_whose_worst_case_is_below_the_threshold_runs_inline() -> None:
    with make_host((NOOP, {"limits": {"timeout_ms": 50}})) as host:
        assert worst_case_ms(host, "on_plain_text") == 50 + DEADLINE_SLACK_MS
        assert _thread_of_call(host, 100) == "loop"
        assert _thread_of_call(host, 50 + DEADLINE_SLACK_MS).startswith("wasmext-call")


def test_inline_is_the_default_for_a_small_budget_and_not_for_the_abi_default() -> None:
    small = INLINE_BELOW_MS - DEADLINE_SLACK_MS - 1
    with make_host((NOOP, {"limits": {"timeout_ms": int(small)}})) as host:
        assert _thread_of_call(host) == "loop"
    with make_host(NOOP) as host:  # timeout_ms 1000: far above the default threshold
        assert _thread_of_call(host).startswith("wasmext-call")


def test_the_worst_case_is_the_sum_over_the_chain_with_each_plugins_slack() -> None:
    with make_host((NOOP, {"limits": {"timeout_ms": 40}}),
                   (NOOP, {"limits": {"timeout_ms": 40}})) as host:
        worst = 2 * (40 + DEADLINE_SLACK_MS)
        assert worst_case_ms(host, "on_plain_text") == worst
        assert _thread_of_call(host, worst).startswith("wasmext-call")
        assert _thread_of_call(host, worst + 1) == "loop"


def test_a_plugin_that_may_run_application_code_never_runs_inline() -> None:
    with make_host((NOOP, {"limits": {"timeout_ms": 5}, "grants": ["tools"]})) as host:
        assert worst_case_ms(host, "on_plain_text") is None
        assert _thread_of_call(host, 10_000).startswith("wasmext-call")


def test_a_lifecycle_event_without_plugins_costs_no_thread_hop() -> None:
    with make_host(NOOP) as host:
        seen: list[str] = []

        async def main() -> tuple[str, bool]:
            async with host.asession() as s:
                sync_call = s.sync.lifecycle

                def recorded(event: str, **fields: Any) -> Any:
                    seen.append(threading.current_thread().name)
                    return sync_call(event, **fields)

                s.sync.lifecycle = recorded  # type: ignore[method-assign]
                result = await s.lifecycle("before_tool", tool_name="calc", args={})
                s.sync.lifecycle = sync_call  # type: ignore[method-assign]
            return threading.current_thread().name, result.proceed

        loop_thread, proceed = asyncio.run(main())
        assert proceed and seen == [loop_thread]


def test_other_methods_take_keyword_arguments_through_the_pool() -> None:
    with make_host(guest_wat(hooks=("before_tool",), response={"ok": True})) as host:
        async def main() -> Any:
            async with host.asession(inline_below_ms=0) as s:
                return await s.lifecycle("before_tool", tool_name="calc", args={})

        assert asyncio.run(main()).proceed


def test_a_session_starts_on_the_loop_when_its_start_hook_is_inline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from wasmext.session import Session

    seen: list[str] = []
    start = Session.start

    def recorded(self: Session) -> Any:
        seen.append(threading.current_thread().name)
        return start(self)

    monkeypatch.setattr(Session, "start", recorded)
    listens = guest_wat(hooks=("session_start",), response={"ok": True})

    async def main(host: Any) -> str:
        async with host.asession():
            pass
        return threading.current_thread().name

    with make_host(NOOP) as host:  # no session_start plugin: a worst case of 0
        loop_thread = asyncio.run(main(host))
        assert seen == [loop_thread]
    seen.clear()
    with make_host(listens) as host:  # its 1000 ms budget: a worker thread
        asyncio.run(main(host))
        assert seen[0].startswith("wasmext-call")
