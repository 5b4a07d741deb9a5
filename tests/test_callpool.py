"""The worker pool of awaited calls: answers, errors, reuse, concurrency, cancellation."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from wasmext import callpool
from wasmext.callpool import CallPool, call_pool


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_call_answers_on_a_named_worker_and_sequential_calls_reuse_it() -> None:
    pool = CallPool(4, name="test-pool")

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        return [await pool.submit(loop, lambda: threading.current_thread().name)
                for _ in range(50)]

    names = _run(main())
    assert set(names) == {"test-pool-0"} and pool.threads == 1


def test_an_error_reaches_the_awaiting_task_and_the_worker_carries_on() -> None:
    pool = CallPool(1)

    def fail(message: str) -> None:
        raise LookupError(message)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        with pytest.raises(LookupError, match="no such thing"):
            await pool.submit(loop, fail, "no such thing")
        return await pool.submit(loop, int, "7")  # type: ignore[no-any-return]

    assert _run(main()) == 7


def test_concurrent_calls_run_at_once_up_to_the_cap_and_beyond_it_wait() -> None:
    pool = CallPool(3)
    barrier = threading.Barrier(3, timeout=10)  # breaks unless 3 calls run at the same time

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        futures = [pool.submit(loop, barrier.wait) for _ in range(3)]
        futures.append(pool.submit(loop, lambda: 42))  # queued until a worker is free
        return await asyncio.gather(*futures)

    assert sorted(_run(main())) == [0, 1, 2, 42] and pool.threads == 3


def test_a_cancelled_await_drops_the_answer_and_the_pool_stays_usable() -> None:
    pool = CallPool(1)
    release = threading.Event()
    errors: list[Any] = []

    async def main() -> str:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        task = asyncio.ensure_future(pool.submit(loop, release.wait, 10))
        await asyncio.sleep(0.01)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await pool.submit(loop, str, "after")  # type: ignore[no-any-return]

    assert _run(main()) == "after" and errors == []


def test_the_process_pool_is_made_once_and_refuses_no_workers() -> None:
    assert call_pool() is call_pool()
    with pytest.raises(ValueError, match="at least one worker"):
        CallPool(0)


def _cancel_a_waiting_call(pool: CallPool) -> tuple[str, list[str]]:
    """One call holds a worker while a second waits behind it and is cancelled; then a
    third call: its answer, and what the cancelled call's function saw run."""
    release = threading.Event()
    started: list[str] = []

    async def main() -> str:
        loop = asyncio.get_running_loop()
        busy = pool.submit(loop, release.wait, 10)
        waiting = asyncio.ensure_future(pool.submit(loop, started.append, "waiting"))
        await asyncio.sleep(0.01)
        waiting.cancel()
        await asyncio.sleep(0)
        release.set()
        await busy
        return await pool.submit(loop, str, "after")  # type: ignore[no-any-return]

    return _run(main()), started


def test_a_call_cancelled_while_queued_never_starts() -> None:
    pool = CallPool(1)  # the busy call holds the only worker: the other waits in its queue
    assert _cancel_a_waiting_call(pool) == ("after", []) and pool.threads == 1


def test_loops_on_several_threads_submitting_at_once_start_at_most_the_cap() -> None:
    # submit takes no lock: idle workers leave tokens and starts are numbered by a
    # counter, so racing submitters may neither start too many threads nor lose a job.
    pool = CallPool(3, name="race-pool")
    answers: list[list[int]] = []
    names: set[str] = set()

    async def many(offset: int) -> list[int]:
        loop = asyncio.get_running_loop()

        def work(i: int) -> int:
            names.add(threading.current_thread().name)
            return i + offset
        return list(await asyncio.gather(*(pool.submit(loop, work, i) for i in range(300))))

    threads = [threading.Thread(target=lambda o=o: answers.append(_run(many(o))))
               for o in (0, 1000, 2000, 3000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(map(sorted, answers)) == [[o + i for i in range(300)]
                                           for o in (0, 1000, 2000, 3000)]
    assert pool.threads <= 3 and names <= {f"race-pool-{i}" for i in range(3)}


def test_a_loop_sends_at_most_its_bound_of_young_calls_and_the_rest_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(callpool, "YOUNG_S", 60.0)  # nothing grows old in this test
    pool = CallPool(4)
    pool.per_loop = 2
    release = [threading.Event() for _ in range(5)]
    started: list[int] = []

    def job(i: int) -> int:
        started.append(i)
        release[i].wait(10)
        return i

    async def main() -> tuple[list[int], list[int]]:
        loop = asyncio.get_running_loop()
        futures = [pool.submit(loop, job, i) for i in range(5)]
        await asyncio.sleep(0.2)
        first = sorted(started)  # two sent, three held on the loop
        for event in release:
            event.set()
        return first, list(await asyncio.gather(*futures))

    first, answers = _run(main())
    assert first == [0, 1]
    assert answers == [0, 1, 2, 3, 4] and sorted(started) == [0, 1, 2, 3, 4]
    assert set(started[2:]) == {2, 3, 4}


def test_calls_that_wait_grow_old_and_no_longer_hold_others_back() -> None:
    pool = CallPool(3)
    pool.per_loop = 2
    release = threading.Event()

    async def main() -> str:
        loop = asyncio.get_running_loop()
        waiting = [pool.submit(loop, release.wait, 10) for _ in range(2)]  # as on I/O
        try:  # answers while both still wait: past YOUNG_S they stop counting
            return await asyncio.wait_for(pool.submit(loop, str, "quick"), 5)  # type: ignore[no-any-return]
        finally:
            release.set()
            await asyncio.gather(*waiting)

    assert _run(main()) == "quick"


def test_a_held_call_cancelled_before_it_is_sent_never_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(callpool, "YOUNG_S", 60.0)
    pool = CallPool(2)
    pool.per_loop = 1  # a worker is idle, but the loop's bound holds the other call back
    assert _cancel_a_waiting_call(pool) == ("after", [])
