"""The deadline watchdog wakes for a new earliest alarm, and only sleeps past later ones."""

from __future__ import annotations

import threading
import time

from wasmext.services.alarms import Alarms


def test_an_earlier_alarm_added_later_fires_first_and_on_time() -> None:
    alarms, fired, done = Alarms("test-alarms"), [], threading.Event()
    start = time.monotonic()
    alarms.at(start + 2.0, lambda: (fired.append("late"), done.set()))
    alarms.at(start + 0.1, lambda: fired.append(("early", time.monotonic() - start)))
    assert done.wait(5)
    assert fired[0][0] == "early" and fired[0][1] < 1.5  # not held until the 2 s alarm
    assert fired[1] == "late"


def test_cancelled_alarms_never_run_and_do_not_hold_up_live_ones() -> None:
    alarms, fired, done = Alarms("test-alarms"), [], threading.Event()
    start = time.monotonic()
    for i in range(100):  # cancelled ones at the head of the heap, as finished requests leave
        alarms.at(start + 0.05 + i / 1000, lambda i=i: fired.append(i))()
    alarms.at(start + 0.3, lambda: (fired.append("live"), done.set()))
    assert done.wait(5)
    assert fired == ["live"]
