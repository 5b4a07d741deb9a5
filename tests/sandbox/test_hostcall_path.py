"""The generic host_call path after its per-call costs were cut (issue 25).

What the path now remembers between calls: the size a guest's memory has reached
(memory never shrinks, so a region inside it needs no size query), the bound
`wasmext_alloc`, the host-call counter series. None of it may outlive what it
stands for: a region past the remembered size is checked against memory as it is
now, a revoked grant is denied at the very next host call, and hostile requests
still get their named answers.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext import InvalidOutput, Plugin, PluginError, Runtime
from wasmext.observe.metrics import Metrics
from wasmext.sandbox.codec import DecodeError, decode
from wasmext.testing import DATA_AT, guest_wat, load_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
PAGE = 65536


def _forwarder(rt: Runtime, request: object, **kwargs: object) -> Plugin:
    """A guest whose hook answer is the answer of one host call of `request`."""
    raw = msgpack.packb(request)
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    plugin = load_wat(rt, guest_wat(body, imports=HOST_CALL, data=raw), **kwargs)
    assert isinstance(plugin, Plugin)
    return plugin


def test_a_request_in_memory_grown_since_the_last_call_is_read(runtime: Runtime) -> None:
    raw = msgpack.packb({"op": "config.get", "key": "greeting"})
    # Each call grows memory by a page and copies the request to the new page's start:
    # past every size the host has seen before the call.
    body = f"""(local $at i32)
      (local.set $at (i32.mul (memory.grow (i32.const 1)) (i32.const {PAGE})))
      (memory.copy (local.get $at) (i32.const {DATA_AT}) (i32.const {len(raw)}))
      (call $host_call (local.get $at) (i32.const {len(raw)}))"""
    plugin = load_wat(runtime, guest_wat(body, imports=HOST_CALL, data=raw),
                      settings={"greeting": "hi"})
    for _ in range(3):
        assert plugin.call("test").value == "hi"


def test_a_request_past_the_end_of_grown_memory_is_refused_by_name(
        runtime: Runtime, healthy: Plugin) -> None:
    # The request starts inside the page grown this call and runs 8 bytes past it.
    body = f"""(local $end i32)
      (drop (memory.grow (i32.const 1)))
      (local.set $end (i32.mul (memory.size) (i32.const {PAGE})))
      (call $host_call (i32.sub (local.get $end) (i32.const 8)) (i32.const 16))"""
    plugin = load_wat(runtime, guest_wat(body, imports=HOST_CALL), plugin_id="straddler")
    with pytest.raises(InvalidOutput, match="outside memory") as info:
        plugin.call("test")
    assert info.value.plugin_id == "straddler"
    assert healthy.call("test", "ping").value == "alive"


def test_an_answer_larger_than_memory_was_lands_where_alloc_grew_it(runtime: Runtime) -> None:
    big = "x" * (300 * 1024)  # more than the guest's two pages: its alloc grows memory
    plugin = _forwarder(runtime, {"op": "config.get", "key": "big"}, settings={"big": big})
    for _ in range(2):
        assert plugin.call("test").value == big


def test_a_grant_revoked_between_calls_is_denied_at_the_next_host_call(
        runtime: Runtime) -> None:
    plugin = _forwarder(runtime, {"op": "secret.get", "key": "token"}, grants={"secrets"})

    def code() -> str:
        with pytest.raises(PluginError) as info:
            plugin.call("test")
        return info.value.code

    assert code() == "not_found"  # granted: the op ran (no such sensitive setting)
    plugin.set_grants(frozenset())
    assert code() == "denied"  # the same idle instance, the next host call
    plugin.set_grants(frozenset({"secrets"}))
    assert code() == "not_found"


@pytest.mark.parametrize("key_bytes", [1, 300])  # a bin 8 and a bin 16 header
def test_a_bytes_map_key_in_a_small_request_is_refused(key_bytes: int) -> None:
    doc = msgpack.packb({"op": "config.get", b"k" * key_bytes: 1}, use_bin_type=True)
    with pytest.raises(DecodeError, match="not a string"):
        decode(doc)
    assert decode(msgpack.packb({"op": "x", "v": b"k" * key_bytes}, use_bin_type=True))["op"] \
        == "x"


mixed_keys = st.recursive(
    st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.binary(max_size=4)
    | st.text(max_size=4),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=3) | st.binary(max_size=3), children, max_size=3),
    max_leaves=12)


def _has_bytes_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(isinstance(k, bytes) or _has_bytes_key(v) for k, v in value.items())
    return isinstance(value, list) and any(_has_bytes_key(v) for v in value)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@given(mixed_keys, st.integers(min_value=4, max_value=64))
@settings(max_examples=300)
def test_short_documents_refuse_bytes_keys_at_any_depth(value: Any, limit: int) -> None:
    # Most of these are shorter than `limit`: decode's shortcut for them (no scan of
    # container marks) must refuse exactly what the full check refuses.
    doc = msgpack.packb(value, use_bin_type=True)
    if _has_bytes_key(value) or _depth(value) > limit:
        with pytest.raises(DecodeError):
            decode(doc, max_depth=limit)
    else:
        assert decode(doc, max_depth=limit) == value


def test_hostile_requests_still_get_their_named_answers(runtime: Runtime) -> None:
    deep: object = 1
    for _ in range(80):
        deep = [deep]
    for request, code in (({"op": "config.get", "key": deep}, "invalid"),
                          ({"op": 7}, "invalid"),
                          ({"op": "no.such.op"}, "unsupported"),
                          ({"op": "config.get", "key": 3}, "invalid")):
        with pytest.raises(PluginError) as info:
            _forwarder(runtime, request, plugin_id="hostile").call("test")
        assert info.value.code == code


def test_host_call_counts_are_exposed_as_one_counter_family() -> None:
    m = Metrics()
    for _ in range(3):
        m.record_host_call("p", "config.get")
    m.forget("p")  # a counter never goes down, and counting goes on after a forget
    m.record_host_call("p", "config.get")
    value = m.registry.get_sample_value("extension_host_calls_total",
                                        {"extension_id": "p", "op": "config.get"})
    assert value == 4.0
    assert m.snapshot()["p"]["host_calls"] == 1
