"""The session trace says how long a quarantine lasts: the fault that starts it and each
call it skips name the seconds left and the time it ends."""

from __future__ import annotations

import re
import time

import pytest

from wasmext import Quarantined
from wasmext.testing import guest_wat, make_host


def test_the_trace_says_for_how_long_and_until_when(caplog: pytest.LogCaptureFixture) -> None:
    trap = guest_wat("unreachable", hooks=("on_plain_text",))
    healthy = guest_wat(response={"ok": True, "value": "fine"}, hooks=("on_plain_text",))
    with make_host((trap, {"plugin_id": "trap"}), (healthy, {"plugin_id": "fine"})) as host, \
            host.session() as s:
        plugin = host.plugins["trap"].plugin
        for _ in range(plugin.quarantine.max_faults + 1):
            s.on_plain_text("x")
        details = [e.detail or "" for e in s.trace.events if e.plugin_id == "trap"]
        assert plugin.quarantined
        with pytest.raises(Quarantined) as refused:
            plugin.call("on_plain_text", "x")
        assert s.on_plain_text("y").value == "fine"  # the healthy plugin still answers
    # Calls 1-4 fault; the fifth starts the quarantine and says so; the sixth is skipped.
    assert all(d.startswith("trap:") for d in details[:4]), details
    began = re.fullmatch(r"now quarantined for (\d+\.\d) s \(until (\d\d:\d\d:\d\d) UTC\); "
                         r"trap: .*", details[4])
    assert began is not None, details[4]
    assert float(began.group(1)) == pytest.approx(plugin.quarantine.cooldown_s, abs=0.2)
    skipped = re.fullmatch(r"quarantined for (\d+\.\d) s more \(until (\d\d:\d\d:\d\d) UTC\)",
                           details[5])
    assert skipped is not None, details[5]
    assert 0 < float(skipped.group(1)) <= plugin.quarantine.cooldown_s
    now = time.time()  # the quarantine is about a second: it ends within seconds of now
    assert {began.group(2), skipped.group(2)} <= {
        time.strftime("%H:%M:%S", time.gmtime(now + d)) for d in range(-3, 4)}
    said = [r.getMessage() for r in caplog.records if "hook on_plain_text failed" in r.getMessage()]
    assert "now quarantined for" not in " ".join(said[:4])
    assert re.search(r"\(trap, policy open; now quarantined for \d+\.\d s \(until "
                     r"\d\d:\d\d:\d\d UTC\)\)", said[4]), said[4]
    err = refused.value
    assert err.seconds_left is not None and 0 < err.seconds_left <= 1.0
    assert re.search(r"quarantined for \d+\.\d s more after repeated faults \(last: trap\)",
                     err.message)
