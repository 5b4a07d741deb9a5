"""The token ledger offers the value it last saw as its compare-and-set's expectation.

A change then costs one store operation instead of a read and a write, but the
store still decides: a write by another process in between is never overwritten
and never lets a reservation pass the day's budget, and a kill at any moment
leaves the day's count before or after a change, never between.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from support import ROOT
from wasmext.errors import OpError
from wasmext.services.llm.ledger import LEDGER_SCOPE, DayLedger
from wasmext.state import Scope, SQLiteStore

DAY = "2026-01-02"


class Counted:
    """A state store whose reads and compare-and-sets are counted."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.gets = self.cases = 0

    def get(self, *args: Any) -> Any:
        self.gets += 1
        return self.store.get(*args)

    def cas(self, *args: Any, **kwargs: Any) -> Any:
        self.cases += 1
        return self.store.cas(*args, **kwargs)


def ledger_on(path: Path) -> tuple[DayLedger, SQLiteStore]:
    store = SQLiteStore(path, durable=False)
    return DayLedger(lambda: store), store


def test_a_change_costs_one_store_operation_once_the_value_is_known(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db", durable=False)
    counted = Counted(store)
    ledger = DayLedger(lambda: counted)  # type: ignore[arg-type,return-value]
    ledger.reserve("p", DAY, 100, 1000)
    assert (counted.gets, counted.cases) == (1, 1)
    for _ in range(5):
        ledger.reserve("p", DAY, 100, 1000)
        ledger.adjust("p", DAY, -60)
    assert (counted.gets, counted.cases) == (1, 11)
    assert ledger.used("p", DAY) == 100 + 5 * 40
    store.close()


def test_another_processes_write_is_never_overwritten(tmp_path: Path) -> None:
    first, one = ledger_on(tmp_path / "state.db")
    second, two = ledger_on(tmp_path / "state.db")
    first.reserve("p", DAY, 100, 1000)
    second.reserve("p", DAY, 50, 1000)  # the first's kept value (100) is now stale
    first.adjust("p", DAY, -30)
    assert first.used("p", DAY) == second.used("p", DAY) == 120
    second.reserve("p", DAY, 10, 1000)
    assert first.used("p", DAY) == 130
    one.close()
    two.close()


def test_a_stale_kept_value_never_passes_the_budget(tmp_path: Path) -> None:
    first, one = ledger_on(tmp_path / "state.db")
    second, two = ledger_on(tmp_path / "state.db")
    first.reserve("p", DAY, 100, 150)  # the first keeps 100
    second.reserve("p", DAY, 50, 150)  # the store holds 150: the day is spent
    with pytest.raises(OpError) as refused:
        first.reserve("p", DAY, 1, 150)
    assert refused.value.code == "limit" and "(150 used)" in refused.value.message
    assert second.used("p", DAY) == 150
    one.close()
    two.close()


def test_an_expired_entry_is_read_again(tmp_path: Path) -> None:
    ledger, store = ledger_on(tmp_path / "state.db")
    ledger.reserve("p", DAY, 100, 1000)
    store.delete(Scope(LEDGER_SCOPE), f"p/{DAY}")  # as when the two-day TTL passed
    ledger.reserve("p", DAY, 10, 1000)
    assert ledger.used("p", DAY) == 10
    store.close()


_CHILD = """
import sys
from pathlib import Path
from wasmext.services.llm.ledger import LEDGER_SCOPE, DayLedger
from wasmext.state import Scope, SQLiteStore

store = SQLiteStore(Path(sys.argv[1]) / "state.db")
ledger = DayLedger(lambda: store)
marker = Path(sys.argv[1]) / "started"
while True:
    ledger.reserve("p", sys.argv[2], 1000, 10**15)   # before the model is asked
    ledger.adjust("p", sys.argv[2], -1)              # the model reported 999
    marker.touch()
"""


@pytest.mark.parametrize("after_s", [0.0, 0.13, 0.37])
def test_a_kill_at_any_moment_leaves_the_day_before_or_after_a_change(
        tmp_path: Path, after_s: float) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_CHILD), str(tmp_path),
                              DAY], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else b""
            assert time.monotonic() < deadline, "the child never changed the ledger"
            time.sleep(0.01)
        time.sleep(after_s)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    ledger, store = ledger_on(tmp_path / "state.db")
    used = ledger.used("p", DAY)
    # k whole calls are 999·k; a kill between a reservation and its settlement, 999·k + 1000
    assert used >= 999 and used % 999 in (0, 1000 % 999)
    ledger.reserve("p", DAY, 1, 10**15)  # the ledger is readable and writable after
    assert ledger.used("p", DAY) == used + 1
    store.close()
