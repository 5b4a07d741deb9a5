"""Many awaited calls at once share the event loop: answers go back in slices, inline
hooks past the iteration's slice wait for the loop's next turn, sessions enter in
order, and every task still gets its own answer."""

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


def test_an_inline_hook_past_the_slice_waits_for_the_next_turn_on_the_loop() -> None:
    host = make_host((ECHO, {"plugin_id": "echo"}))
    try:
        inline_ms = (worst_case_ms(host, "on_plain_text") or 0.0) + 1

        async def main() -> tuple[list[str], list[Any]]:
            ran: list[str] = []
            async with host.asession(inline_below_ms=inline_ms) as s:
                call = s.sync.on_plain_text
                s.sync.on_plain_text = lambda text: (  # type: ignore[method-assign]
                    ran.append(f"{text} on {threading.current_thread().name}"),
                    call(text))[1]
                first = await s.on_plain_text("a")  # the slice has room: on the loop
                share_of(asyncio.get_running_loop()).spent = SLICE_S  # this turn's is used
                other = asyncio.create_task(asyncio.sleep(0, ran.append("other task")))
                second = await s.on_plain_text("b")  # waits a turn, then on the loop
                await other
            return ran, [first.value, second.value]

        ran, values = asyncio.run(main())
        assert values == ["a", "b"]
        # No worker thread took it (a pool thread running Python beside the loop takes
        # the GIL from it), and the other task ran before it: the loop came round.
        main_thread = threading.main_thread().name
        assert ran == [f"a on {main_thread}", "other task", f"b on {main_thread}"]
    finally:
        host.close()


def test_a_woken_batch_that_uses_the_slice_up_leaves_the_rest_first_in_line() -> None:
    async def main() -> tuple[list[int], int]:
        share = share_of(asyncio.get_running_loop())
        share.spent = SLICE_S
        order: list[int] = []
        iterations = 0

        async def count() -> None:
            nonlocal iterations
            while len(order) < 6:
                iterations += 1
                await asyncio.sleep(0)

        async def one(i: int) -> None:
            await share.turn()
            order.append(i)
            share.charge(SLICE_S / 2)  # two of these use a slice up

        counter = asyncio.create_task(count())
        await asyncio.gather(*(one(i) for i in range(6)))
        await counter
        return order, iterations

    order, iterations = asyncio.run(main())
    assert order == list(range(6))  # those that waited again kept their places
    assert iterations >= 5, iterations  # two per turn of the loop, not six in one


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


def test_a_heartbeat_keeps_beating_while_a_thousand_sessions_run_in_either_mode() -> None:
    host = make_host((ECHO, {"plugin_id": "echo"}))
    try:
        inline_ms = (worst_case_ms(host, "on_plain_text") or 0.0) + 1

        async def main(inline_below_ms: float) -> tuple[list[Any], int]:
            beats = 0
            done = asyncio.Event()

            async def heartbeat() -> None:
                nonlocal beats
                while not done.is_set():
                    beats += 1
                    await asyncio.sleep(0.001)

            async def one(i: int) -> Any:
                async with host.asession(inline_below_ms=inline_below_ms) as s:
                    await s.on_plain_text("x")
                    return (await s.on_plain_text(str(i))).value

            beating = asyncio.create_task(heartbeat())
            await asyncio.sleep(0)
            before = beats
            answers = await asyncio.gather(*(one(i) for i in range(1000)))
            during = beats - before
            done.set()
            await beating
            return list(answers), during

        for mode in (0, inline_ms):  # the call pool, then on the loop
            answers, beats = asyncio.run(main(mode))
            assert answers == [str(i) for i in range(1000)]
            assert beats >= 2, f"the heartbeat did not run while sessions did ({mode})"
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
