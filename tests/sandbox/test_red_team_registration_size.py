"""A registration map is kept decoded for as long as its plugin is loaded (a shareable
one also with the module, for copies). Under `max_output_bytes` (1 MiB) a map of a
million empty arrays, a byte of MessagePack each, kept 70 MiB per loaded plugin and took
0.7 s to load: five loads of it held 360 MiB. More than `MAX_REGISTRATION_VALUES` keys,
items and values in one map is `InvalidOutput` at load."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from support import rss_mib
from wasmext import InvalidOutput, Plugin, Runtime
from wasmext.sandbox.plugin import MAX_REGISTRATION_VALUES
from wasmext.testing import guest_wat, load_wat

BOUND_S = 5.0
GROWTH_MIB = 32


def registration(junk: Any) -> dict[str, Any]:
    return {"hooks": [{"hook": "test"}], "name": "bulky", "junk": junk}


# Made when a test asks (a million lists cost every test process a second to collect).
HOSTILE: dict[str, Callable[[], Any]] = {
    "a million empty arrays": lambda: [[] for _ in range(1_000_000)],
    "maps of maps": lambda: [{"k": {"k": {}}} for _ in range(100_000)],
    "one wide map": lambda: {f"k{i}": 0 for i in range(40_000)},
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_registration_of_too_many_values_is_refused_and_not_kept(
        runtime: Runtime, healthy: Plugin, case: str) -> None:
    wat = guest_wat(registration=registration(HOSTILE[case]()))
    before = rss_mib()
    for n in range(3):
        started = time.monotonic()
        with pytest.raises(InvalidOutput, match=f"over {MAX_REGISTRATION_VALUES} values"):
            load_wat(runtime, wat, plugin_id=f"bulky{n}")
        assert time.monotonic() - started < BOUND_S
    assert rss_mib() - before < GROWTH_MIB
    assert not any(pid.startswith("bulky") for pid in runtime.plugins)
    assert healthy.call("test", "ping").value == "alive"


def test_a_registration_just_under_the_cap_loads(runtime: Runtime) -> None:
    # Three keys and their values, the hook entry (a key and its value) and the list
    # holding it take 9 of the values.
    junk = list(range(MAX_REGISTRATION_VALUES - 9))
    plugin = load_wat(runtime, guest_wat(registration=registration(junk)), plugin_id="full")
    assert plugin.call("test").value == "ok"
    with pytest.raises(InvalidOutput, match="values"):
        load_wat(runtime, guest_wat(registration=registration([*junk, 0])), plugin_id="over")
