"""One call budget for every backend (issue 24, class 3): an Extism plugin's host calls
are counted and bounded by its call's deadline, a cancel interrupts it, and a grant
change reaches an instance in the middle of a call. Each attack asserts the named
error, a generous time bound, and a healthy plugin answering afterwards."""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from test_extism_backend import COPY_INPUT, FORWARD, HOST_CALL, LENGTH, module

from loopback import Loopback
from support import cancel_call
from wasmext import Cancelled, Host, HostCallLimitExceeded, PluginError, Runtime, Timeout
from wasmext.sandbox import calltree
from wasmext.sandbox.backends.extism import ExtismPlugin
from wasmext.sandbox.hostcalls import CallContext
from wasmext.sandbox.plugin import Plugin
from wasmext.testing import DATA_AT, guest_wat, load_wat, make_host

needs_extism = pytest.mark.skipif(importlib.util.find_spec("extism") is None,
                                  reason="the extism package is not installed")


@pytest.fixture
def host() -> Iterator[Host]:
    with make_host() as h:
        yield h


def forward(plugin: Any, request: dict[str, Any]) -> Any:
    """Have an Extism plugin send `request` as its host call; the host's answer."""
    return msgpack.unpackb(plugin.call("forward", msgpack.packb(request)).value)


@needs_extism
def test_an_extism_plugins_fetch_ends_at_its_calls_deadline(host: Host,
                                                            server: Loopback) -> None:
    server.server.slow_s = 20.0  # far past the deadline, and past the old 30 s fallback too
    plugin = host.add(module(HOST_CALL + LENGTH, funcs=FORWARD), plugin_id="ext-fetch",
                      grants={"http", "http:127.0.0.1"},
                      limits={"timeout_ms": 500, "host_call_timeout_ms": 5000})
    assert isinstance(plugin, ExtismPlugin)
    started = time.monotonic()
    # The op's `timeout` answer, or, when a loaded machine delivered that answer past
    # the margin the op keeps, the sandbox's own `Timeout` for the same deadline: a
    # fetch that was never cut off would run for the server's 20 s.
    answer: Any = None
    timed_out: Timeout | None = None
    try:
        answer = forward(plugin, {"op": "http.fetch", "url": server.url("/slow")})
    except Timeout as err:
        timed_out = err
    if timed_out is not None:
        assert "500 ms" in str(timed_out)
    else:
        assert answer["ok"] is False and answer["error"]["code"] == "timeout", answer
        assert "deadline" in answer["error"]["message"]
    assert time.monotonic() - started < 3.0
    assert forward(plugin, {"op": "abi.info"})["ok"] is True  # the same plugin answers
    fast = forward(plugin, {"op": "http.fetch", "url": server.url("/hello")})
    assert fast["ok"] is True and fast["value"]["status"] == 200


LOOP_HOST_CALLS = """
  (func (export "flood") (result i32)""" + COPY_INPUT + """
    (loop $again
      (drop (call $host_call (local.get $block)))
      (br $again))
    (i32.const 0))"""


@needs_extism
def test_an_extism_plugins_host_calls_are_counted(runtime: Runtime, healthy: Plugin) -> None:
    plugin = runtime.load(module(HOST_CALL, funcs=LOOP_HOST_CALLS), plugin_id="ext-flood",
                          limits={"max_host_calls": 50, "timeout_ms": 10_000})
    started = time.monotonic()
    with pytest.raises(HostCallLimitExceeded, match="more than 50 host calls") as info:
        plugin.call("flood", msgpack.packb({"op": "abi.info"}))
    assert time.monotonic() - started < 5.0  # the guest was stopped, not left to loop
    assert info.value.plugin_id == "ext-flood"
    assert plugin.call("echo", "still serving").value == "still serving"
    assert healthy.call("test").value == "alive"


@needs_extism
def test_a_cancel_interrupts_a_spinning_extism_plugin(runtime: Runtime,
                                                      healthy: Plugin) -> None:
    plugin = runtime.load(module(), plugin_id="ext-spin",
                          limits={"timeout_ms": 30_000, "fuel_per_call": 10**12})
    error, ran, after_cancel = cancel_call(plugin, "spin", "", after_s=0.5)
    assert isinstance(error, Cancelled), repr(error)
    assert error.plugin_id == "ext-spin"
    assert ran >= 0.5 and after_cancel < 5.0
    assert plugin.call("echo", "alive").value == "alive"
    assert healthy.call("test").value == "alive"


@needs_extism
def test_a_nested_extism_call_never_outlives_its_caller(runtime: Runtime,
                                                       healthy: Plugin) -> None:
    """Called while another plugin's call is in progress (a caller with 300 ms left), a
    spinning Extism guest ends by the caller's deadline, not by its own 30 s."""
    plugin = runtime.load(module(), plugin_id="ext-nested",
                          limits={"timeout_ms": 30_000, "fuel_per_call": 10**12})
    started = time.monotonic()
    caller = calltree.enter(started, 0.3, 100)
    try:
        with pytest.raises(Timeout, match="caller's deadline") as info:
            plugin.call("spin", "")
    finally:
        calltree.leave(caller)
    assert time.monotonic() - started < 3.0
    assert info.value.inherited  # the caller's time ran out: not this plugin's fault
    assert plugin.call("echo", "alive").value == "alive"
    assert healthy.call("test").value == "alive"


def _three_host_calls() -> str:
    """A guest that sends x.power, x.pause, x.power and answers with the last answer."""
    raws = [msgpack.packb({"op": op}) for op in ("x.power", "x.pause", "x.power")]
    at, calls = DATA_AT, []
    for raw in raws:
        calls.append(f"(call $host_call (i32.const {at}) (i32.const {len(raw)}))")
        at += len(raw)
    body = f"(drop {calls[0]}) (drop {calls[1]}) {calls[2]}"
    imports = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
    return guest_wat(body, imports=imports, data=b"".join(raws))


def test_set_grants_reaches_an_instance_mid_call(runtime: Runtime, healthy: Plugin) -> None:
    paused, resume = threading.Event(), threading.Event()
    powered: list[str] = []

    def power(ctx: CallContext, req: dict[str, Any]) -> str:
        powered.append(ctx.plugin_id)
        return "power"

    def pause(ctx: CallContext, req: dict[str, Any]) -> None:
        paused.set()
        resume.wait(5)

    runtime.services.register("x.power", power, capability="power")
    runtime.services.register("x.pause", pause, capability="")
    plugin = load_wat(runtime, _three_host_calls(), plugin_id="revoked", grants={"power"})
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["value"] = plugin.call("test").value
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    started = time.monotonic()
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    assert paused.wait(5)
    plugin.set_grants(frozenset())  # the operator revokes while the call is in the host
    resume.set()
    worker.join(5)
    assert time.monotonic() - started < 3.0
    error = out.get("error")
    assert isinstance(error, PluginError) and error.code == "denied", out
    assert "power" in error.message
    assert powered == ["revoked"]  # granted before the change, refused after it
    plugin.set_grants(frozenset({"power"}))
    assert plugin.call("test").value == "power"
    assert healthy.call("test").value == "alive"


@needs_extism
def test_an_extism_plugin_sees_set_grants_at_its_next_host_call(runtime: Runtime) -> None:
    runtime.services.register("x.power", lambda ctx, req: "power", capability="power")
    plugin = runtime.load(module(HOST_CALL + LENGTH, funcs=FORWARD), plugin_id="ext-grants",
                          grants={"power"})
    assert forward(plugin, {"op": "x.power"}) == {"ok": True, "value": "power"}
    plugin.set_grants(frozenset())
    assert forward(plugin, {"op": "x.power"})["error"]["code"] == "denied"
