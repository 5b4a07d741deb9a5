"""A store no other process can reach keeps the token ledger beside it, in this process.

The memory backend is `process_local`: the day's counts are kept in one table per
store, shared by every ledger on it, and the store is never written. The budget
holds as it does on a shared store: ledgers on the same store share one count,
concurrent reservations never pass it, and a change of a day that is over never
resets today's count.
"""

from __future__ import annotations

import threading

import pytest

from wasmext.errors import OpError
from wasmext.services.llm.ledger import LEDGER_SCOPE, DayLedger
from wasmext.state import MemoryStore, Scope

DAY, NEXT_DAY = "2026-01-02", "2026-01-03"


def test_ledgers_on_one_memory_store_share_its_count_and_never_write_it() -> None:
    store = MemoryStore()
    first, second = DayLedger(lambda: store), DayLedger(lambda: store)
    first.reserve("p", DAY, 600, 1000)
    assert second.used("p", DAY) == 600
    with pytest.raises(OpError) as refused:
        second.reserve("p", DAY, 500, 1000)  # 600 + 500 > 1000, whichever ledger asks
    assert refused.value.code == "limit" and "1000" in refused.value.message
    second.adjust("p", DAY, -200)  # the model reported less
    assert first.used("p", DAY) == 400
    second.reserve("p", DAY, 600, 1000)
    assert first.used("p", DAY) == 1000
    assert store.get(Scope(LEDGER_SCOPE), f"p/{DAY}") is None
    assert store.records() == []
    other = DayLedger(lambda: MemoryStore())  # another store: another count
    assert other.used("p", DAY) == 0


def test_concurrent_reservations_on_a_memory_store_never_pass_the_budget() -> None:
    store = MemoryStore()
    ledgers = [DayLedger(lambda: store) for _ in range(2)]
    granted: list[int] = []
    refusals: list[str] = []
    lock = threading.Lock()

    def spend(ledger: DayLedger) -> None:
        for _ in range(200):
            try:
                ledger.reserve("p", DAY, 7, 1000)
            except OpError as err:
                refusals.append(err.code)
                continue
            with lock:
                granted.append(7)

    threads = [threading.Thread(target=spend, args=(ledgers[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(granted) == 1000 // 7 * 7
    assert set(refusals) == {"limit"}
    assert ledgers[0].used("p", DAY) == sum(granted)


def test_a_change_of_a_day_that_is_over_leaves_today_counted() -> None:
    store = MemoryStore()
    ledger = DayLedger(lambda: store)
    ledger.reserve("p", DAY, 900, 1000)
    ledger.reserve("p", NEXT_DAY, 800, 1000)  # midnight passed: a new day's count
    assert ledger.used("p", NEXT_DAY) == 800
    ledger.adjust("p", DAY, -900)  # yesterday's call settles late
    ledger.reserve("p", DAY, 10, 1000)  # a call that read the clock before midnight
    assert ledger.used("p", NEXT_DAY) == 800
    with pytest.raises(OpError):
        ledger.reserve("p", NEXT_DAY, 300, 1000)
    with pytest.raises(OpError):  # a late reservation is still held to the budget alone
        ledger.reserve("p", DAY, 1001, 1000)


def test_a_ledger_without_a_store_counts_the_same_way() -> None:
    ledger = DayLedger()
    ledger.reserve("p", DAY, 1000, 1000)
    with pytest.raises(OpError):
        ledger.reserve("p", DAY, 1, 1000)
    ledger.adjust("p", DAY, -1000)
    assert ledger.used("p", DAY) == 0
