"""A session trace keeps notes cheaply and gives them back as TraceEvents, in order."""

from __future__ import annotations

import threading
import time

from wasmext import Trace, TraceEvent
from wasmext.hooks.ordering import Entry


def test_notes_become_events_in_order_up_to_the_limit_and_stay_the_same_objects() -> None:
    trace = Trace(limit=3)
    entry = Entry("p1", "on_plain_text", 50, "explicit", 0, 0)
    before = time.time()
    trace.add(entry, "changed", None)
    trace.note("on_llm_output", "failed", "bad\x1b[31m value\nsecond line", "p2")
    added = time.time()
    first = trace.events
    assert first == [
        TraceEvent("on_plain_text", "p1", "changed", None, first[0].time),
        TraceEvent("on_llm_output", "p2", "failed", first[1].detail, first[1].time)]
    assert before <= first[0].time <= first[1].time <= added  # when noted, not when read
    assert "\x1b" not in (first[1].detail or "") and "\n" not in (first[1].detail or "")
    trace.add(entry, "stop", None)
    trace.add(entry, "unchanged", None)  # over the limit: dropped
    again = trace.events
    assert again is first and [e.outcome for e in again] == ["changed", "failed", "stop"]
    assert again[2].as_dict() == {"hook": "on_plain_text", "plugin": "p1", "outcome": "stop",
                                  "detail": None}


def test_readers_on_several_threads_get_each_event_once() -> None:
    trace = Trace(limit=50_000)
    entry = Entry("p1", "on_plain_text", 50, "explicit", 0, 0)
    for _ in range(20_000):
        trace.add(entry, "unchanged", None)
    start = threading.Barrier(4)
    seen: list[int] = []

    def read() -> None:
        start.wait(10)
        seen.append(len(trace.events))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == [20_000] * 4 and len({id(e) for e in trace.events}) == 20_000


def test_remembered_details_are_cleaned_every_time_and_the_table_stays_bounded() -> None:
    from wasmext import session as session_module
    from wasmext.text import clean

    trace = Trace(limit=5_000)
    entry = Entry("p1", "on_plain_text", 50, "explicit", 0, 0)
    hostile = "bad\x1b[31m\r\nvalue"
    long = "x\x07" * 200 + "https://user:secret@host/"
    for _ in range(2):  # the second note of each takes the remembered form
        trace.note("pre", "failed", hostile, "p1")
        trace.add(entry, "failed", long)
    for i in range(1_000):  # a plugin making up a detail per call
        trace.note("pre", "failed", f"reason {i}\x00", "p1")
    details = [e.detail for e in trace.events]
    assert details[:4] == [clean(hostile), clean(long)] * 2
    assert details[4:] == [clean(f"reason {i}\x00") for i in range(1_000)]
    assert all("\x1b" not in d and "\x00" not in d and "secret" not in d for d in details)
    assert len(session_module._DETAILS) <= 256
    assert long not in session_module._DETAILS  # long details are not kept
