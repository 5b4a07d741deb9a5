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
from wasmext.sandbox.codec import decode, encode
from wasmext.sandbox.hostcalls import (
    KNOWN_REQUEST_BYTES,
    KNOWN_REQUESTS,
    CallContext,
    HostServices,
    KnownRequest,
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


def _looper(rt: Runtime, request: object, limits: dict[str, int],
            region: bool = False) -> Plugin:
    """A guest whose hook sends `request` through host_call for ever; `region`: it
    declares an answer region (ABI minor 3), so its answers take the path that charges
    their time inline (`on_host_call`), else `wasmext_alloc`'s."""
    raw = msgpack.packb(request)
    body = f"""(loop $l (drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)})))
                        (br $l))
      (i64.const 0)"""
    reg: dict[str, object] = {"hooks": [{"hook": "test"}]}
    if region:
        reg.update(abi_minor=3, answer_region={"ptr": 16384, "size": 4096})
    plugin = load_wat(rt, guest_wat(body, imports=HOST_CALL_IMPORT, data=raw,
                                    registration=reg),
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
    known: dict[bytes, KnownRequest] = {}
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


@pytest.mark.parametrize("region", [False, True], ids=["alloc", "region"])
def test_a_known_request_is_counted_against_max_host_calls(
        runtime: Runtime, healthy: Plugin, region: bool) -> None:
    plugin = _looper(runtime, {"op": "config.get", "key": "greeting"},
                     {"max_host_calls": 100, "fuel_per_call": 10**10, "timeout_ms": 60_000},
                     region)
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


@pytest.mark.parametrize("region", [False, True], ids=["alloc", "region"])
def test_known_local_host_calls_are_charged_to_the_host_call_time(
        generous: Runtime, region: bool) -> None:
    # 1 ms of host-call time: over long before the fuel or the deadline run out.
    plugin = _looper(generous, {"op": "config.get", "key": "greeting"},
                     {"max_host_calls": 10**9, "host_call_timeout_ms": 1,
                      "fuel_per_call": 10**12, "timeout_ms": 60_000}, region)
    started = time.monotonic()
    with pytest.raises(HostCallLimitExceeded, match="1 ms spent in host calls"):
        plugin.call("test")
    assert time.monotonic() - started < 3
    assert _healthy(generous).call("test", "ping").value == "alive"


@pytest.mark.parametrize("region", [False, True], ids=["alloc", "region"])
def test_known_local_host_calls_end_by_the_call_deadline(generous: Runtime, region: bool) -> None:
    plugin = _looper(generous, {"op": "config.get", "key": "greeting"},
                     {"max_host_calls": 10**9, "host_call_timeout_ms": 60_000,
                      "fuel_per_call": 10**12, "timeout_ms": 300}, region)
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
    known: dict[bytes, KnownRequest] = {}
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


def _served(services: HostServices, ctx: CallContext, known: dict[bytes, KnownRequest],
            raw: bytes) -> bytes:
    """One host call of `raw` the way an instance serves it: decoded and remembered the
    first time, then through `known_local` (the built-in ops are local)."""
    pack = _PACK
    if raw in known and known[raw][0] in services.local_ops:
        return services.known_local(ctx, known[raw], pack)
    return services.dispatch_packed(ctx, raw, 64, pack, known)


_PACK = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def test_a_remembered_answer_is_only_the_packing_of_the_very_same_scalar() -> None:
    """Second pass (issue 25): a known `config.get` keeps its last answer's bytes with the
    value they pack, and reuses them only when the handler, run anew, returns that same
    object. A changed setting, a list changed in place, a setting made sensitive and a
    withdrawn grant are all answered as the general path answers them."""
    ctx = CallContext("p", frozenset(), {"s": "hi", "xs": [1, 2], "big": "x" * 400},
                      frozenset(), PluginLog("p", 10, 100))
    services, known = HostServices(), dict[bytes, KnownRequest]()

    def agrees(request: dict[str, object]) -> bytes:
        raw = msgpack.packb(request)
        got = _served(services, ctx, known, raw)
        assert got == encode(services.dispatch(ctx, raw, 64))  # byte for byte the general path
        return got

    get_s = {"op": "config.get", "key": "s"}
    agrees(get_s)  # decoded, and remembered
    second = agrees(get_s)  # served as known: its answer is kept
    assert agrees(get_s) is second  # the same object, the same bytes: not packed again
    entry = known[msgpack.packb(get_s)]
    assert entry[2] is ctx.settings["s"] and entry[3] is second
    ctx.settings["s"] = "bye"  # the mapping changed in place: read anew
    assert decode(agrees(get_s))["value"] == "bye"
    ctx.settings["s"] = "".join(["b", "ye"])  # equal, but another object: packed anew
    assert decode(agrees(get_s))["value"] == "bye"
    ctx.sensitive = frozenset({"s"})
    assert decode(agrees(get_s))["error"]["code"] == "denied"
    ctx.sensitive = frozenset()

    get_xs = {"op": "config.get", "key": "xs"}
    assert decode(agrees(get_xs))["value"] == [1, 2]
    ctx.settings["xs"].append(3)  # the same list object, changed: never remembered
    assert decode(agrees(get_xs))["value"] == [1, 2, 3]
    assert known[msgpack.packb(get_xs)][3] == b""

    get_big = {"op": "config.get", "key": "big"}
    for _ in range(3):
        assert decode(agrees(get_big))["value"] == "x" * 400
    assert known[msgpack.packb(get_big)][3] == b""  # over KNOWN_ANSWER_BYTES: not kept

    class Loud(str):
        """A str subclass: packed as a str, but never taken for an immutable scalar."""

    ctx.settings["s"] = Loud("hi")
    for _ in range(3):
        assert decode(agrees(get_s))["value"] == "hi"
    assert type(known[msgpack.packb(get_s)][2]) is str


def test_a_remembered_secret_answer_is_not_given_once_the_grant_is_withdrawn() -> None:
    ctx = CallContext("p", frozenset({"secrets"}), {"token": "t0p"}, frozenset({"token"}),
                      PluginLog("p", 10, 100))
    services, known = HostServices(), dict[bytes, KnownRequest]()
    raw = msgpack.packb({"op": "secret.get", "key": "token"})
    for _ in range(3):
        assert decode(_served(services, ctx, known, raw)) == {"ok": True, "value": "t0p"}
    assert known[raw][2] == "t0p"  # its answer is kept with the value ...
    ctx.grants = frozenset()
    answer = decode(_served(services, ctx, known, raw))  # ... but the grant is read anew
    assert answer["error"]["code"] == "denied" and "t0p" not in str(answer)
