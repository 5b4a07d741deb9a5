"""agents.request / agents.send from real guests: grants, hooks, timeouts, cycles, storms."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import wasmtime

from wasmext import Host, PluginError
from wasmext.testing import DATA_AT, guest_wat, make_host

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


def agent_wasm(request: dict[str, Any], hook: str = "turn") -> bytes:
    raw = msgpack.packb(request)
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                    imports=HOST_CALL, data=raw,
                    registration={"hooks": [{"hook": hook}], "abi_minor": 1})
    return bytes(wasmtime.wat2wasm(wat))


@pytest.fixture
def host() -> Iterator[Host]:
    with make_host() as h:
        h.agents.register("echo", lambda data: {"echo": data})
        yield h


def add(host: Host, pid: str, request: dict[str, Any], grants: set[str],
        hook: str = "turn") -> Any:
    return host.add(agent_wasm(request, hook), plugin_id=pid, grants={"agents", *grants})


def refused(plugin: Any, code: str, within_s: float, hook: str = "turn") -> str:
    started = time.monotonic()
    with pytest.raises(PluginError) as info:
        plugin.call(hook)
    assert time.monotonic() - started < within_s
    assert info.value.code == code, info.value.message
    return info.value.message


def healthy(host: Host) -> None:
    if "healthy" not in host.plugins:
        add(host, "healthy", {"op": "agents.request", "agent": "echo", "input": 1},
            {"agents:echo"})
    assert host.plugins["healthy"].plugin.call("turn").value == {"echo": 1}


def test_request_answers_with_the_agents_answer(host: Host) -> None:
    plugin = add(host, "asker", {"op": "agents.request", "agent": "echo", "input": [1, "a"]},
                 {"agents:ech*"})
    assert plugin.call("turn").value == {"echo": [1, "a"]}
    step = add(host, "stepper", {"op": "agents.request", "agent": "echo", "input": 2},
               {"agents:*"}, hook="step")
    assert step.call("step").value == {"echo": 2}


def test_a_session_factory_gets_a_fresh_session_per_call(host: Host) -> None:
    closed: list[int] = []

    class Session:
        def __init__(self) -> None:
            self.n = len(closed)

        def ask(self, data: Any) -> Any:
            return {"session": self.n, "got": data}

        def close(self) -> None:
            closed.append(self.n)

    host.agents.register("helper", Session, factory=True)
    plugin = add(host, "asker", {"op": "agents.request", "agent": "helper", "input": "q"},
                 {"agents:helper"})
    assert plugin.call("turn").value == {"session": 0, "got": "q"}
    assert plugin.call("turn").value == {"session": 1, "got": "q"}
    assert closed == [0, 1]


@pytest.mark.parametrize(("request_", "grants", "hook", "code"), [
    ({"op": "agents.request", "agent": "echo", "input": 1}, {"agents:echo"}, "test", "denied"),
    ({"op": "agents.request", "agent": "echo", "input": 1}, {"agents:*"}, "tool_call",
     "denied"),
    ({"op": "agents.request", "agent": "echo", "input": 1}, {"agents:other"}, "turn",
     "denied"),
    ({"op": "agents.request", "agent": "ghost", "input": 1}, {"agents:*"}, "turn",
     "not_found"),
    ({"op": "agents.request", "agent": "echo"}, {"agents:*"}, "turn", "invalid"),
    ({"op": "agents.request", "agent": "echo", "input": 1, "timeout_ms": 0}, {"agents:*"},
     "turn", "invalid"),
    ({"op": "agents.send", "agent": "echo", "input": 1}, {"agents:echo"}, "step_x", "denied"),
])
def test_refusals(host: Host, request_: dict[str, Any], grants: set[str], hook: str,
                  code: str) -> None:
    refused(add(host, "bad", request_, grants, hook), code, 2, hook)
    healthy(host)


def test_a_slow_agent_times_out(host: Host) -> None:
    release = threading.Event()
    host.agents.register("sleepy", lambda data: release.wait(10))
    plugin = add(host, "waiter", {"op": "agents.request", "agent": "sleepy", "input": 1,
                                  "timeout_ms": 200}, {"agents:*"})
    try:
        refused(plugin, "timeout", 1.5)
        healthy(host)
    finally:
        release.set()


def test_a_failing_agent_is_a_failed_answer(host: Host) -> None:
    def broken(data: Any) -> Any:
        raise RuntimeError("agent bug")

    host.agents.register("broken", broken)
    plugin = add(host, "caller", {"op": "agents.request", "agent": "broken", "input": 1},
                 {"agents:*"})
    assert "RuntimeError" in refused(plugin, "failed", 2)
    healthy(host)


def relay(host: Host, pid: str) -> Any:
    """An agent that runs plugin `pid`'s turn hook and reports its answer or error."""
    def agent(data: Any) -> Any:
        try:
            return {"value": host.plugins[pid].plugin.call("turn").value}
        except PluginError as err:
            return {"code": err.code, "message": err.message}
    return agent


def test_an_agent_cycle_is_refused(host: Host) -> None:
    # plugin p asks agent a; a runs plugin q, which asks agent b; b runs p again,
    # which asks a: a is already on the chain.
    add(host, "p", {"op": "agents.request", "agent": "a", "input": 0}, {"agents:*"})
    add(host, "q", {"op": "agents.request", "agent": "b", "input": 0}, {"agents:*"})
    host.agents.register("a", relay(host, "q"))
    host.agents.register("b", relay(host, "p"))
    started = time.monotonic()
    answer = host.plugins["p"].plugin.call("turn").value
    assert time.monotonic() - started < 3
    inner = answer["value"]  # a runs q, q asks b, b runs p, p asks a: refused
    assert inner["code"] == "limit"
    assert "cycle: a -> b -> a" in inner["message"]
    healthy(host)


def test_agent_chains_stop_at_the_depth_limit(host: Host) -> None:
    for n in range(7):
        add(host, f"p{n}", {"op": "agents.request", "agent": f"a{n}", "input": 0},
            {"agents:*"})
        host.agents.register(f"a{n}", relay(host, f"p{n + 1}"))
    add(host, "p7", {"op": "agents.request", "agent": "echo", "input": "bottom"}, {"agents:*"})
    answer = host.plugins["p0"].plugin.call("turn").value
    agents_ran = 1  # a0 answered p0
    while "value" in answer:
        answer = answer["value"]
        agents_ran += 1
    assert answer["code"] == "limit" and "deeper than 4" in answer["message"]
    assert agents_ran == 4  # a0..a3 ran; p4's call of a4 was the fifth level
    healthy(host)


def test_send_does_not_wait_and_a_storm_is_refused(host: Host) -> None:
    release, got = threading.Event(), []
    host.agents.register("inbox", lambda data: (release.wait(10), got.append(data)))
    plugin = add(host, "sender", {"op": "agents.send", "agent": "inbox", "input": "m"},
                 {"agents:inbox"})
    codes = []
    started = time.monotonic()
    for _ in range(40):
        try:
            assert plugin.call("turn").value is None
            codes.append("ok")
        except PluginError as err:
            codes.append(err.code)
    assert time.monotonic() - started < 5  # nothing waited for the blocked agent
    assert codes.count("ok") == 16 and set(codes[16:]) == {"limit"}
    release.set()
    deadline = time.monotonic() + 5
    while len(got) < 16 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == ["m"] * 16
    healthy(host)
