"""Host calls a guest repeats (issue 25): what the fast path remembers, and what it never may.

An instance remembers small flat requests it decoded before, and serves the host's
own in-memory ops (`config.get`, `secret.get`, `abi.info`, `log`) without bounding
the frame's deadline while they run. Remembered are only the decoder's results:
settings, grants and handlers are read on every call, every host call is still
counted and timed, and the memory is bounded whatever the guest sends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from wasmext import HostCallLimitExceeded, Plugin, PluginError, Runtime, Timeout
from wasmext.sandbox.codec import decode
from wasmext.sandbox.hostcalls import (
    KNOWN_REQUEST_BYTES,
    KNOWN_REQUESTS,
    CallContext,
    HostServices,
)
from wasmext.sandbox.limits import Limits
from wasmext.sandbox.pluginlog import PluginLog
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, guest_wat, load_wat


def _forwarder(rt: Runtime, request: object, **kwargs: Any) -> Plugin:
    """A guest whose hook answer is the answer of one host call of `request`."""
    raw = msgpack.packb(request)
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    plugin = load_wat(rt, guest_wat(body, imports=HOST_CALL_IMPORT, data=raw), **kwargs)
    assert isinstance(plugin, Plugin)
    return plugin


def _looper(rt: Runtime, request: object, limits: dict[str, int]) -> Plugin:
    """A guest whose hook sends `request` through host_call for ever."""
    raw = msgpack.packb(request)
    body = f"""(loop $l (drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)})))
                        (br $l))
      (i64.const 0)"""
    plugin = load_wat(rt, guest_wat(body, imports=HOST_CALL_IMPORT, data=raw),
                      plugin_id="looper", settings={"greeting": "hi"}, limits=limits)
    assert isinstance(plugin, Plugin)
    return plugin


def test_a_setting_changed_between_calls_is_read_anew_by_the_same_instance(
        runtime: Runtime) -> None:
    plugin = _forwarder(runtime, {"op": "config.get", "key": "greeting"},
                        settings={"greeting": "hi"})
    assert plugin.call("test").value == "hi"
    assert plugin.call("test").value == "hi"  # the request is known now
    idle = list(plugin._idle)
    plugin.settings["greeting"] = "bye"
    assert plugin.call("test").value == "bye"
    assert list(plugin._idle) == idle  # the same instance answered
    plugin.sensitive = frozenset({"greeting"})
    for inst in idle:
        inst.ctx.sensitive = plugin.sensitive
    with pytest.raises(PluginError) as info:
        plugin.call("test")
    assert info.value.code == "denied"  # now a secret: config.get may not read it


def test_a_handler_registered_over_a_builtin_is_not_served_as_local(runtime: Runtime) -> None:
    plugin = _forwarder(runtime, {"op": "config.get", "key": "greeting"},
                        settings={"greeting": "hi"})
    assert plugin.call("test").value == "hi"
    assert "config.get" in runtime.services.local_ops
    seen: list[float] = []

    def replaced(ctx: CallContext, req: dict[str, object]) -> str:
        seen.append(ctx.deadline)
        return "replaced"

    runtime.services.register("config.get", replaced)
    assert "config.get" not in runtime.services.local_ops
    assert plugin.call("test").value == "replaced"  # a known request, the new handler
    assert seen


def _services_ctx() -> tuple[HostServices, CallContext]:
    ctx = CallContext("p", frozenset(), {"k0": "v0"}, frozenset(), PluginLog("p", 10, 100))
    return HostServices(), ctx


def test_what_an_instance_remembers_is_bounded_and_only_flat_small_maps() -> None:
    services, ctx = _services_ctx()
    known: dict[bytes, tuple[str, dict[str, object]]] = {}
    pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack
    for i in range(KNOWN_REQUESTS * 4):  # a guest sending ever new requests
        raw = msgpack.packb({"op": "config.get", "key": f"k{i}"})
        answer = decode(services.dispatch_packed(ctx, raw, 64, pack, known))
        assert answer == ({"ok": True, "value": "v0"} if i == 0 else
                          {"ok": False, "error": {"code": "not_found",
                                                  "message": f"no setting 'k{i}'"}})
    assert len(known) == KNOWN_REQUESTS
    known.clear()
    nested = msgpack.packb({"op": "config.get", "key": "k0", "x": {"y": [1]}})
    long = msgpack.packb({"op": "config.get", "key": "k0", "pad": "x" * KNOWN_REQUEST_BYTES})
    bad = b"\x81\xa2op\xc1"  # 0xc1 is never used in MessagePack
    for raw in (nested, long, bad):
        services.dispatch_packed(ctx, raw, 64, pack, known)
    assert known == {}
    assert decode(services.dispatch_packed(ctx, bad, 64, pack, known))["error"]["code"] \
        == "invalid"


def test_a_known_request_is_counted_against_max_host_calls(
        runtime: Runtime, healthy: Plugin) -> None:
    plugin = _looper(runtime, {"op": "config.get", "key": "greeting"},
                     {"max_host_calls": 100, "fuel_per_call": 10**10, "timeout_ms": 60_000})
    started = time.monotonic()
    with pytest.raises(HostCallLimitExceeded, match="100 host calls") as info:
        plugin.call("test")
    assert time.monotonic() - started < 3
    assert info.value.plugin_id == "looper"
    assert healthy.call("test", "ping").value == "alive"


@pytest.fixture
def generous() -> Iterator[Runtime]:
    """A runtime whose policy allows millions of host calls in one hook call."""
    with Runtime(policy=Limits(fuel_per_call=10**12, timeout_ms=60_000,
                               max_host_calls=10**9, host_call_timeout_ms=60_000)) as rt:
        yield rt


def _healthy(rt: Runtime) -> Plugin:
    plugin = load_wat(rt, guest_wat(response={"ok": True, "value": "alive"}),
                      plugin_id="healthy")
    assert isinstance(plugin, Plugin)
    return plugin


def test_known_local_host_calls_are_charged_to_the_host_call_time(generous: Runtime) -> None:
    # 1 ms of host-call time: over long before the fuel or the deadline run out.
    plugin = _looper(generous, {"op": "config.get", "key": "greeting"},
                     {"max_host_calls": 10**9, "host_call_timeout_ms": 1,
                      "fuel_per_call": 10**12, "timeout_ms": 60_000})
    started = time.monotonic()
    with pytest.raises(HostCallLimitExceeded, match="1 ms spent in host calls"):
        plugin.call("test")
    assert time.monotonic() - started < 3
    assert _healthy(generous).call("test", "ping").value == "alive"


def test_known_local_host_calls_end_by_the_call_deadline(generous: Runtime) -> None:
    plugin = _looper(generous, {"op": "config.get", "key": "greeting"},
                     {"max_host_calls": 10**9, "host_call_timeout_ms": 60_000,
                      "fuel_per_call": 10**12, "timeout_ms": 300})
    started = time.monotonic()
    with pytest.raises(Timeout) as info:
        plugin.call("test")
    assert time.monotonic() - started < 3
    assert info.value.plugin_id == "looper"
    assert _healthy(generous).call("test", "ping").value == "alive"


def test_an_answer_alloc_past_the_deadline_is_a_timeout_not_a_guest_trap(
        generous: Runtime) -> None:
    req = msgpack.packb({"op": "config.get", "key": "greeting"})
    # The allocator serves the host's request buffer, then spins once $armed is set:
    # the deadline passes inside wasmext_alloc while the host delivers an answer.
    alloc = """(if (global.get $armed) (then (loop $spin (br $spin))))
        (i32.const 100000)"""
    body = f"""(global.set $armed (i32.const 1))
      (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))"""
    wat = guest_wat(body, imports=HOST_CALL_IMPORT, data=req, alloc_body=alloc,
                    memory_pages=4, extra="(global $armed (mut i32) (i32.const 0))")
    plugin = load_wat(generous, wat, plugin_id="slow-alloc", settings={"greeting": "hi"},
                      limits={"fuel_per_call": 10**12, "timeout_ms": 300})
    started = time.monotonic()
    with pytest.raises(Timeout) as info:
        plugin.call("test")
    assert time.monotonic() - started < 3
    assert info.value.plugin_id == "slow-alloc"
    assert _healthy(generous).call("test", "ping").value == "alive"


# -- red team: what a hostile guest may try against the remembered requests -------------


def test_a_remembered_secret_get_is_denied_once_the_grant_is_withdrawn(
        runtime: Runtime, healthy: Plugin) -> None:
    plugin = _forwarder(runtime, {"op": "secret.get", "key": "token"},
                        settings={"token": "s3cr3t-value"}, grants=["secrets"])
    plugin.sensitive = frozenset({"token"})
    for inst in plugin._idle:
        inst.ctx.sensitive = plugin.sensitive
    assert plugin.call("test").value == "s3cr3t-value"
    assert plugin.call("test").value == "s3cr3t-value"  # a known request: the fast path
    assert any(inst._known for inst in plugin._idle)
    plugin.set_grants(frozenset())
    started = time.monotonic()
    with pytest.raises(PluginError) as info:
        plugin.call("test")
    assert time.monotonic() - started < 3
    assert info.value.code == "denied"
    assert "s3cr3t-value" not in str(info.value)
    assert healthy.call("test", "ping").value == "alive"


def test_another_plugins_remembered_request_answers_nothing_of_it(runtime: Runtime) -> None:
    """The same request bytes from two plugins: each instance remembers only what it
    decoded, and each answer is read from its own plugin's settings and grants."""
    mine = _forwarder(runtime, {"op": "secret.get", "key": "token"}, plugin_id="mine",
                      settings={"token": "mine-secret"}, grants=["secrets"])
    theirs = _forwarder(runtime, {"op": "secret.get", "key": "token"}, plugin_id="theirs",
                        settings={"token": "x"})
    for plugin in (mine, theirs):
        plugin.sensitive = frozenset({"token"})
        for inst in plugin._idle:
            inst.ctx.sensitive = plugin.sensitive
    assert mine.call("test").value == "mine-secret"
    assert mine.call("test").value == "mine-secret"
    for _ in range(2):
        with pytest.raises(PluginError) as info:
            theirs.call("test")
        assert info.value.code == "denied" and "mine-secret" not in str(info.value)


def test_wide_requests_are_not_remembered() -> None:
    """HOLE (fixed): 256 bytes of one-letter fields decode to a map of ~80 entries, so
    32 remembered requests held about five times what 32 small ones do, in every
    instance. A request with more fields than any op takes is decoded every time."""
    services, ctx = _services_ctx()
    known: dict[bytes, tuple[str, dict[str, object]]] = {}
    pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack
    for i in range(KNOWN_REQUESTS):
        wide: dict[str, object] = {"op": "config.get", "key": "k0"}
        letter = 0
        while len(msgpack.packb({**wide, chr(33 + letter): i})) <= KNOWN_REQUEST_BYTES:
            wide[chr(33 + letter)] = i
            letter += 1
        raw = msgpack.packb(wide)
        assert len(raw) <= KNOWN_REQUEST_BYTES and len(wide) > 60
        for _ in range(2):
            assert decode(services.dispatch_packed(ctx, raw, 64, pack, known)) == \
                {"ok": True, "value": "v0"}
    assert known == {}
    usual = msgpack.packb({"op": "log", "level": "info", "msg": "hi"})
    services.dispatch_packed(ctx, usual, 64, pack, known)
    assert list(known) == [usual]  # what the ops take is still remembered
