"""Many awaited calls at once share the event loop: answers go back in slices, inline
hooks past the iteration's slice take the pool, sessions enter in order, and every
task still gets its own answer."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import wasmtime

from wasmext.aio import worst_case_ms
from wasmext.callpool import BATCH, SLICE_S, CallPool, share_of
from wasmext.ids import random_hex
from wasmext.testing import guest_wat, make_host

ECHO = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True},
                                         hooks=("on_plain_text",))))


def test_a_thousand_answers_reach_their_own_tasks_over_several_iterations() -> None:
    pool = CallPool(4, name="share-test")
    iterations = 0

    async def count_iterations(stop: asyncio.Event) -> None:
        nonlocal iterations
        while not stop.is_set():
            iterations += 1
            await asyncio.sleep(0)

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        counter = asyncio.create_task(count_iterations(stop))
        answers = await asyncio.gather(*(pool.submit(loop, lambda i=i: i * 2)
                                         for i in range(1000)))
        stop.set()
        await counter
        return list(answers)

    assert asyncio.run(main()) == [i * 2 for i in range(1000)]
    # At most BATCH answers are settled per drain, so other tasks ran in between.
    assert iterations >= 1000 // BATCH


def test_an_inline_hook_past_the_slice_takes_the_pool_and_answers_the_same() -> None:
    host = make_host((ECHO, {"plugin_id": "echo"}))
    try:
        inline_ms = (worst_case_ms(host, "on_plain_text") or 0.0) + 1

        async def main() -> tuple[list[str], list[Any]]:
            ran_on: list[str] = []
            async with host.asession(inline_below_ms=inline_ms) as s:
                call = s.sync.on_plain_text
                s.sync.on_plain_text = lambda text: (  # type: ignore[method-assign]
                    ran_on.append(threading.current_thread().name), call(text))[1]
                first = await s.on_plain_text("a")  # the slice has room: on the loop
                share_of(asyncio.get_running_loop()).spent = SLICE_S  # this turn's is used
                second = await s.on_plain_text("b")  # so this one hops
            return ran_on, [first.value, second.value]

        ran_on, values = asyncio.run(main())
        assert values == ["a", "b"]
        assert ran_on[0] == threading.main_thread().name
        assert ran_on[1].startswith("wasmext-call")
    finally:
        host.close()


def test_tasks_waiting_for_a_turn_go_first_come_first_served_a_batch_per_iteration() -> None:
    async def main() -> tuple[list[int], list[int]]:
        share = share_of(asyncio.get_running_loop())
        share.spent = SLICE_S  # this iteration's slice is used: everyone waits
        order: list[int] = []
        batches: list[int] = []

        async def one(i: int) -> None:
            await share.turn()
            order.append(i)

        async def watch() -> None:  # how many got through by each iteration
            while len(order) < 3 * BATCH:
                batches.append(len(order))
                await asyncio.sleep(0)
        await asyncio.gather(watch(), *(one(i) for i in range(3 * BATCH)))
        return order, batches

    order, batches = asyncio.run(main())
    assert order == list(range(3 * BATCH))
    assert all(b - a <= BATCH for a, b in itertools.pairwise(batches))


def test_sessions_entered_at_once_all_run_and_answer() -> None:
    host = make_host((ECHO, {"plugin_id": "echo"}))
    try:
        async def one(i: int) -> Any:
            async with host.asession(inline_below_ms=0) as s:
                return (await s.on_plain_text(str(i))).value

        async def main() -> list[Any]:
            share_of(asyncio.get_running_loop()).spent = SLICE_S
            return list(await asyncio.gather(*(one(i) for i in range(3 * BATCH))))

        assert asyncio.run(main()) == [str(i) for i in range(3 * BATCH)]
    finally:
        host.close()


def test_random_ids_are_distinct_and_uuid_shaped_across_threads() -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def make() -> None:
        ids = [random_hex() for _ in range(2000)]
        with lock:
            seen.extend(ids)
    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == len(seen) == 8000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in seen)


def test_a_finished_loop_and_its_share_are_not_kept_alive() -> None:
    import gc
    import weakref

    from wasmext.callpool import call_pool

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()
        loops.append(weakref.ref(loop))
        share_of(loop).charge(0.0)
        return await call_pool().submit(loop, int, "3")  # type: ignore[no-any-return]

    assert [asyncio.run(main()) for _ in range(3)] == [3, 3, 3]
    gc.collect()
    assert all(ref() is None for ref in loops)
