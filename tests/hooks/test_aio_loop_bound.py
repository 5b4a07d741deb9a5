"""Attack: a plugin that spins to its budget blocks the event loop no longer than the bound.

An inline hook (worst case below `inline_below_ms`) runs on the loop, so the
loop waits for it: at most its `timeout_ms` plus the deadline slack. A hook
above the threshold runs in a worker thread and the loop stays free while
it spins. A task on the same loop measures the longest gap between its
wake-ups. The bounds are generous (a busy machine delays threads), and each
is far below what an unbounded spin would cost: fuel is set so high that
only the wall-clock deadline can end the call.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from wasmext.aio import DEADLINE_SLACK_MS, INLINE_BELOW_MS
from wasmext.testing import guest_wat, make_host

SPIN = guest_wat("(loop (br 0)) (i64.const 0)", hooks=("on_plain_text",))
HEALTHY = guest_wat(hooks=("on_llm_output",), response={"ok": True, "value": "fine"})
NO_FUEL_LIMIT = 10**10  # the runtime's cap: minutes of spinning, so the deadline ends it
MARGIN_S = 0.5  # a loaded two-core machine may hold a thread back this long


async def _longest_gap(work: Callable[[], Awaitable[Any]]) -> tuple[Any, float, str]:
    """Run `work` while a task on the same loop wakes every 2 ms; the longest gap seen."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.002)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    result = await work()
    done.set()
    await task
    return result, max(gaps), threading.current_thread().name


def test_an_inline_spin_blocks_the_loop_at_most_its_bound_then_a_healthy_plugin_answers(
        ) -> None:
    timeout_ms = int(INLINE_BELOW_MS - DEADLINE_SLACK_MS - 5)  # inline by default
    spin = {"plugin_id": "spin", "limits": {"timeout_ms": timeout_ms,
                                            "fuel_per_call": NO_FUEL_LIMIT}}
    with make_host((SPIN, spin), (HEALTHY, {"plugin_id": "healthy"})) as host:
        ran_on: list[str] = []

        async def main() -> tuple[Any, float, str, Any]:
            async with host.asession() as s:
                sync_call = s.sync.on_plain_text

                def recorded(text: str) -> Any:
                    ran_on.append(threading.current_thread().name)
                    return sync_call(text)

                s.sync.on_plain_text = recorded
                result, gap, loop_thread = await _longest_gap(lambda: s.on_plain_text("hi"))
                return result, gap, loop_thread, await s.on_llm_output("hello")

        started = time.monotonic()
        result, gap, loop_thread, healthy = asyncio.run(main())
        assert ran_on == [loop_thread]  # inline: the loop really waited for the spin
        assert result.value == "hi" and result.failed == ["spin"]
        assert [(f.plugin_id, f.reason) for f in host.faults] == [("spin", "timeout")]
        assert gap >= timeout_ms / 1000 * 0.9  # it spun to its budget, on the loop ...
        assert gap < INLINE_BELOW_MS / 1000 + MARGIN_S  # ... and no longer than the bound
        assert time.monotonic() - started < 10
        assert healthy.value == "fine" and healthy.changed_by == ["healthy"]


def test_a_spin_above_the_threshold_runs_in_a_thread_and_the_loop_stays_free() -> None:
    spin = {"plugin_id": "spin", "limits": {"timeout_ms": 1000, "fuel_per_call": NO_FUEL_LIMIT}}
    with make_host((SPIN, spin), (HEALTHY, {"plugin_id": "healthy"})) as host:
        async def main() -> tuple[Any, float, float, Any]:
            async with host.asession() as s:
                started = time.monotonic()
                result, gap, _ = await _longest_gap(lambda: s.on_plain_text("hi"))
                return result, gap, time.monotonic() - started, await s.on_llm_output("x")

        result, gap, took, healthy = asyncio.run(main())
        assert result.failed == ["spin"] and host.faults[-1].reason == "timeout"
        assert took >= 0.9  # the spin lasted its whole second ...
        assert gap < MARGIN_S  # ... while the loop kept running other tasks
        assert healthy.value == "fine"
