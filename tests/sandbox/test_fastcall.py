"""The cached-signature path is pinned to a wasmtime range and behaves exactly
like the public API it replaces."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from wasmext import GuestTrap, OutOfFuel, Runtime
from wasmext.sandbox import fastcall
from wasmext.testing import guest_wat, load_wat


def test_installed_wasmtime_is_in_the_verified_range() -> None:
    major = int(version("wasmtime").split(".")[0])
    low, high = fastcall.SUPPORTED_WASMTIME
    assert low <= major < high
    assert fastcall.FAST_PATH, "the fast path must be active on the pinned wasmtime"


@pytest.fixture(params=["fast", "public"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "public":
        monkeypatch.setattr(fastcall, "_RAW", None)
    return str(request.param)


def test_same_results_on_both_paths(runtime: Runtime, path: str) -> None:
    plugin = load_wat(runtime, guest_wat(response={"ok": True, "value": [1, "two", None]}))
    for data in (None, "x" * 5000, {"k": list(range(100))}):
        assert plugin.call("test", data).value == [1, "two", None]


def test_same_traps_on_both_paths(runtime: Runtime, path: str) -> None:
    looping = load_wat(runtime, guest_wat("(loop (br 0)) (i64.const 0)"), plugin_id="loop",
                       limits={"fuel_per_call": 10_000})
    with pytest.raises(OutOfFuel):
        looping.call("test")
    trapping = load_wat(runtime, guest_wat("unreachable"), plugin_id="trap")
    with pytest.raises(GuestTrap, match="unreachable"):
        trapping.call("test")


def test_high_pointers_round_trip_unsigned(runtime: Runtime, path: str) -> None:
    # A pointer >= 2**31 must reach the guest as the same u32 (not sign-mangled).
    body = "(i64.extend_i32_u (local.get $p))"
    plugin = load_wat(runtime, guest_wat(body), limits={"max_output_bytes": 2**32 - 1})
    inst = plugin._borrow()
    # The raw export is called inside the call's budget, as `PluginInstance.call` does:
    # outside one, an epoch tick on a slow machine traps the guest (the watchdog's rule).
    inst._set_budget(inst.limits.fuel_per_call, inst.budget.enter())
    try:
        assert inst._call(0x8000_0000, 0) == 0x8000_0000
        assert inst._call(0xFFFF_FFFF, 0) == 0xFFFF_FFFF
    finally:
        inst.budget.leave()
