"""Host-call answers in the guest's own area (ABI minor 3, SPEC 1.4 and 3).

A guest of minor 3 may declare `"answer_region": {"ptr", "size"}` in its registration
map; an answer that fits is written there (no `wasmext_alloc` entry), anything else is
delivered as before. The area is the guest's word, so it is checked against the
memory's size at every answer: an area outside memory, overlapping the request, or
of any size never makes the host write outside the guest's memory, and a guest of an
older minor is served exactly as before.
"""

from __future__ import annotations

import time
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext import HostCallLimitExceeded, InvalidOutput, Plugin, PluginError, Runtime
from wasmext._abi import ABI_MINOR, REGISTRATION_KEYS
from wasmext.sandbox.plugin import Registration
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, RESPONSE_AT, guest_wat, load_wat

GET = msgpack.packb({"op": "config.get", "key": "greeting"})
AREA = 16384  # inside the guests' 2 pages, past their data and before their heap
# {"ok": true, "value": <bool>} with the bool's byte last: the "where" hooks patch it.
WHERE_RESPONSE = {"ok": True, "value": False}
WHERE_BYTE = RESPONSE_AT + len(msgpack.packb(WHERE_RESPONSE)) - 1


def _registration(region: Any, minor: int = 3) -> dict[str, Any]:
    reg: dict[str, Any] = {"hooks": [{"hook": "test"}], "abi_minor": minor}
    if region is not None:
        reg["answer_region"] = region
    return reg


def _call(request: bytes = GET) -> str:
    return f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(request)}))"


def _forwarder(rt: Runtime, region: Any, *, minor: int = 3, before: str = "",
               request: bytes = GET, **kwargs: Any) -> Plugin:
    """A guest whose hook answer is the answer of one host call (after `before`)."""
    plugin = load_wat(rt, guest_wat(before + _call(request), imports=HOST_CALL_IMPORT,
                                    data=request, registration=_registration(region, minor)),
                      settings={"greeting": "hi"}, **kwargs)
    assert isinstance(plugin, Plugin)
    return plugin


def _where(rt: Runtime, region: Any, *, minor: int = 3, before: str = "",
           request: bytes = GET, **kwargs: Any) -> Plugin:
    """A guest whose hook answers whether its host call's answer came back at AREA."""
    body = f"""(local $r i64) {before}
      (local.set $r {_call(request)})
      (i32.store8 (i32.const {WHERE_BYTE})
        (i32.add (i32.const 0xc2)
                 (i64.eq (i64.shr_u (local.get $r) (i64.const 32)) (i64.const {AREA}))))
      (i64.const {(RESPONSE_AT << 32) | len(msgpack.packb(WHERE_RESPONSE))})"""
    plugin = load_wat(rt, guest_wat(body, response=WHERE_RESPONSE, imports=HOST_CALL_IMPORT,
                                    data=request, registration=_registration(region, minor)),
                      settings={"greeting": "hi"}, **kwargs)
    assert isinstance(plugin, Plugin)
    return plugin


def _region(size: int = 256, ptr: int = AREA) -> dict[str, int]:
    return {"ptr": ptr, "size": size}


def test_an_answer_that_fits_lands_in_the_area_without_wasmext_alloc(runtime: Runtime) -> None:
    assert REGISTRATION_KEYS["answer_region"] == 3 <= ABI_MINOR
    assert _forwarder(runtime, _region()).call("test").value == "hi"
    where = _where(runtime, _region(), plugin_id="where")
    assert where.registration.answer_region == (AREA, 256)
    assert where.describe()["answer_region"] == {"ptr": AREA, "size": 256}  # `inspect --json`
    assert "answer_region" not in where.registration.extra
    assert [where.call("test").value for _ in range(3)] == [True, True, True]
    # The allocator was never bound for an answer: no second guest entry.
    assert all(inst._alloc_fn is None for inst in where._idle)


def test_an_answer_larger_than_the_area_still_arrives_through_wasmext_alloc(
        runtime: Runtime) -> None:
    long = "x" * 100
    forwarder = _forwarder(runtime, _region(size=16))
    forwarder.settings["greeting"] = long
    assert forwarder.call("test").value == long
    where = _where(runtime, _region(size=16), plugin_id="where")
    where.settings["greeting"] = long
    assert where.call("test").value is False
    where.settings["greeting"] = "hi"  # {"ok": true, "value": "hi"}: 14 bytes, fits
    assert where.call("test").value is True


def test_an_area_past_the_end_of_memory_falls_back_and_is_used_once_memory_grows(
        runtime: Runtime, healthy: Plugin) -> None:
    # Two pages of memory; the area starts in the fourth.
    past = 3 * 65536
    started = time.monotonic()
    where = _where(runtime, {"ptr": past, "size": 64})
    assert where.call("test").value is False
    forwarder = _forwarder(runtime, {"ptr": past, "size": 64}, plugin_id="forwarder")
    assert forwarder.call("test").value == "hi"
    # The same declaration once the guest has grown its memory over the area: checked
    # against the size at every answer, so it is used.
    grow = "(drop (memory.grow (i32.const 2)))"
    at_past = _forwarder(runtime, {"ptr": past, "size": 64}, before=grow, plugin_id="grown")
    assert at_past.call("test").value == "hi"
    inst = at_past._idle[0]
    assert inst.memory.view[past:past + 14].tobytes() == msgpack.packb({"ok": True,
                                                                        "value": "hi"})
    assert time.monotonic() - started < 10
    assert healthy.call("test").value == "alive"


def test_an_area_at_the_top_of_the_address_space_never_makes_the_host_write_outside(
        runtime: Runtime, healthy: Plugin) -> None:
    top = (1 << 32) - 16
    where = _where(runtime, {"ptr": top, "size": 16})
    assert where.call("test").value is False  # outside memory: delivered by wasmext_alloc
    forwarder = _forwarder(runtime, {"ptr": top, "size": 16}, plugin_id="forwarder")
    assert [forwarder.call("test").value for _ in range(3)] == ["hi"] * 3
    assert healthy.call("test").value == "alive"


def test_a_huge_area_costs_only_the_answer(runtime: Runtime, healthy: Plugin) -> None:
    huge = {"ptr": 8, "size": (1 << 32) - 8}
    assert Registration.parse(_registration(huge), "p").answer_region == (8, (1 << 32) - 8)
    started = time.monotonic()
    forwarder = _forwarder(runtime, huge)
    assert [forwarder.call("test").value for _ in range(50)] == ["hi"] * 50
    assert time.monotonic() - started < 10
    inst = forwarder._idle[0]
    # Only the answer's bytes were written: the rest of the "area" is as it was.
    assert inst.memory.view[8:22].tobytes() == msgpack.packb({"ok": True, "value": "hi"})
    assert inst.memory.view[22:64].tobytes() == bytes(42)
    assert healthy.call("test").value == "alive"


def test_an_area_over_the_request_is_the_guests_own_loss(runtime: Runtime,
                                                        healthy: Plugin) -> None:
    # The host copied the request before it answered, so the first answer is right; the
    # answer then lies over the request, and the next call sends those bytes: a request
    # with bytes after its map, answered `invalid`, never a host fault.
    forwarder = _forwarder(runtime, {"ptr": DATA_AT, "size": 64})
    assert forwarder.call("test").value == "hi"
    with pytest.raises(PluginError) as err:
        forwarder.call("test")
    assert err.value.code == "invalid"
    assert forwarder.faults == 0
    assert healthy.call("test").value == "alive"


def test_host_calls_answered_in_the_area_are_still_counted_and_bounded(
        runtime: Runtime, healthy: Plugin) -> None:
    loop = f"(loop $l (drop {_call()}) (br $l)) (i64.const 0)"
    looper = load_wat(runtime, guest_wat(loop, imports=HOST_CALL_IMPORT, data=GET,
                                         registration=_registration(_region())),
                      plugin_id="looper", settings={"greeting": "hi"},
                      limits={"max_host_calls": 50})
    started = time.monotonic()
    with pytest.raises(HostCallLimitExceeded):
        looper.call("test")
    assert time.monotonic() - started < 3
    assert healthy.call("test").value == "alive"


@pytest.mark.parametrize("minor", [0, 1, 2])
def test_a_guest_of_an_older_minor_is_served_as_before(runtime: Runtime, minor: int) -> None:
    where = _where(runtime, _region(), minor=minor)
    assert where.registration.answer_region is None
    assert where.describe()["answer_region"] is None
    assert where.registration.extra["answer_region"] == _region()  # an unknown key, kept
    assert where.call("test").value is False
    # Malformed, it loads as it did: the key means nothing below minor 3.
    odd = _forwarder(runtime, "not a region", minor=minor, plugin_id="odd")
    assert odd.call("test").value == "hi"


@pytest.mark.parametrize("region", [
    {"ptr": 0, "size": 16}, {"ptr": AREA, "size": 0}, {"ptr": -8, "size": 16},
    {"ptr": AREA, "size": -1}, {"ptr": (1 << 32) - 8, "size": 16}, {"ptr": AREA},
    {"ptr": AREA, "size": 16, "more": 1}, {"ptr": True, "size": 16}, {"ptr": 1.5, "size": 16},
    [AREA, 16], "here", None,
])
def test_a_malformed_area_refuses_the_registration(runtime: Runtime, healthy: Plugin,
                                                   region: Any) -> None:
    reg = {**_registration(None), "answer_region": region}  # None too: the key is there
    wat = guest_wat(_call(), imports=HOST_CALL_IMPORT, data=GET, registration=reg)
    started = time.monotonic()
    with pytest.raises(InvalidOutput, match="answer_region"):
        load_wat(runtime, wat)
    assert time.monotonic() - started < 3
    assert healthy.call("test").value == "alive"


_ANY = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 40), 1 << 40) |
                    st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.sampled_from(["ptr", "size", "x"]), inner, max_size=3),
                    max_leaves=8)


@given(_ANY)
def test_any_declared_area_is_refused_by_name_or_lies_in_wasm32(region: Any) -> None:
    raw = {**_registration(None), "answer_region": region}
    if not (type(region) is dict and set(region) == {"ptr", "size"} and
            type(region["ptr"]) is int and type(region["size"]) is int and
            region["ptr"] >= 1 and region["size"] >= 1 and
            region["ptr"] + region["size"] <= 1 << 32):
        with pytest.raises(InvalidOutput, match="answer_region"):
            Registration.parse(raw, "p")
        return
    reg = Registration.parse(raw, "p")
    assert reg.answer_region is not None
    ptr, size = reg.answer_region
    assert type(ptr) is int and type(size) is int
    assert ptr >= 1 and size >= 1 and ptr + size <= 1 << 32
    assert region == {"ptr": ptr, "size": size}


@given(st.integers(0, (1 << 32) + 8), st.integers(0, (1 << 32) + 8))
def test_an_area_of_ints_is_kept_exactly_when_it_lies_in_wasm32(ptr: int, size: int) -> None:
    inside = ptr >= 1 and size >= 1 and ptr + size <= 1 << 32
    try:
        reg = Registration.parse(_registration({"ptr": ptr, "size": size}), "p")
    except InvalidOutput:
        assert not inside
    else:
        assert inside and reg.answer_region == (ptr, size)
