"""agents.request / agents.send from real guests: grants, hooks, timeouts, cycles, storms."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import wasmtime

from wasmext import Host, PluginError
from wasmext.callpool import call_pool
from wasmext.errors import WasmextError
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
    ({"op": "agents.send", "agent": "echo", "input": 1}, {"agents:echo"}, "report", "denied"),
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
    senders = [add(host, f"sender{n}", {"op": "agents.send", "agent": "inbox", "input": "m"},
                   {"agents:inbox"}) for n in range(5)]
    codes: dict[str, list[str]] = {}
    messages: dict[str, set[str]] = {}
    started = time.monotonic()
    for plugin in senders:
        for _ in range(40):
            try:
                assert plugin.call("turn").value is None
                codes.setdefault(plugin.id, []).append("ok")
            except PluginError as err:
                codes.setdefault(plugin.id, []).append(err.code)
                messages.setdefault(plugin.id, set()).add(err.message.split(" (")[0])
    assert time.monotonic() - started < 10  # nothing waited for the blocked agent
    # Each plugin gets its share (4 of the 16 slots); the fifth finds the host full.
    for n in range(4):
        assert codes[f"sender{n}"][:4] == ["ok"] * 4
        assert set(codes[f"sender{n}"][4:]) == {"limit"}
        assert messages[f"sender{n}"] == {f"plugin sender{n} has 4 agent calls in flight"}
    assert set(codes["sender4"]) == {"limit"}
    assert messages["sender4"] == {"too many agent calls in flight"}
    release.set()
    deadline = time.monotonic() + 5
    while len(got) < 16 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == ["m"] * 16
    healthy(host)


def looping_wasm(request: dict[str, Any], times: int) -> bytes:
    """A turn guest that sends `request` `times` times and answers the last answer."""
    raw = msgpack.packb(request)
    call = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    body = f"""(local $i i32) (local $r i64)
      (loop $again
        (local.set $r {call})
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $again (i32.lt_u (local.get $i) (i32.const {times}))))
      (local.get $r)"""
    wat = guest_wat(body, imports=HOST_CALL, data=raw,
                    registration={"hooks": [{"hook": "turn"}], "abi_minor": 1})
    return bytes(wasmtime.wat2wasm(wat))


BIG_BUDGET = {"timeout_ms": 20_000, "host_call_timeout_ms": 20_000, "max_host_calls": 1000}


def test_a_fan_out_stops_at_the_call_trees_agent_runs(host: Host) -> None:
    runs: list[str] = []
    lock = threading.Lock()

    def counted(name: str, then: Any = None) -> Any:
        def agent(data: Any) -> Any:
            with lock:
                runs.append(name)
            return then(data) if then else name
        return agent

    # One root call asks 10 times for `fan`, which runs a plugin that asks 10 times for
    # `leaf`, and so on: 110 runs, and 1000 asks from the root alone, without the cap.
    host.agents.register("leaf", counted("leaf"))
    inner = host.add(looping_wasm({"op": "agents.request", "agent": "leaf", "input": 0}, 10),
                     plugin_id="inner", grants={"agents", "agents:leaf"}, limits=BIG_BUDGET)
    host.agents.register("fan", counted("fan", lambda data: inner.call("turn").value))
    outer = host.add(looping_wasm({"op": "agents.request", "agent": "fan", "input": 0}, 10),
                     plugin_id="outer", grants={"agents", "agents:fan"}, limits=BIG_BUDGET)
    started = time.monotonic()
    assert "agent runs" in refused(outer, "limit", 20)  # the last asks were refused
    assert len(runs) == 64  # max_runs_per_call, over the whole tree
    wide = host.add(looping_wasm({"op": "agents.request", "agent": "leaf", "input": 0}, 1000),
                    plugin_id="wide", grants={"agents", "agents:leaf"}, limits=BIG_BUDGET)
    runs.clear()
    message = refused(wide, "limit", 20)
    assert "the call tree has started its 64 agent runs" in message
    assert len(runs) == 64  # a 1000-call budget, and still 64 runs
    assert time.monotonic() - started < 20
    runs.clear()
    healthy(host)  # a new root call has a budget of its own


def test_a_call_trees_agent_time_is_bounded(host: Host) -> None:
    host.agents.max_tree_ms = 1000
    release, runs = threading.Event(), []
    host.agents.register("slow", lambda data: (runs.append(1), release.wait(0.3)))
    plugin = host.add(looping_wasm({"op": "agents.request", "agent": "slow", "input": 0,
                                    "timeout_ms": 5000}, 50),
                      plugin_id="patient", grants={"agents", "agents:slow"}, limits=BIG_BUDGET)
    started = time.monotonic()
    try:
        assert "agent time (1 s) is spent" in refused(plugin, "limit", 3)
        assert time.monotonic() - started >= 0.9  # the runs went on until the tree's end
        # At 0, 0.3, 0.6 and 0.9 s (fewer on a loaded machine); the last was cut at 1 s.
        # Without the tree's time, the 50 asks would run for 15 s.
        assert 2 <= len(runs) <= 4
        healthy(host)
    finally:
        release.set()


@pytest.mark.parametrize("hop", ["direct", "call pool"])
def test_an_abandoned_run_is_cancelled(host: Host, hop: str) -> None:
    spin = guest_wat("(loop $forever (br $forever)) (i64.const 0)",
                     registration={"hooks": [{"hook": "turn"}], "abi_minor": 1})
    spinner = host.add(bytes(wasmtime.wat2wasm(spin)), plugin_id="spinner",
                       limits={"timeout_ms": 10_000, "fuel_per_call": 10**15})
    ended: list[tuple[str, float]] = []

    def stuck(data: Any) -> Any:
        began = time.monotonic()
        async def on_the_pool() -> Any:
            loop = asyncio.get_running_loop()
            return await call_pool().submit(loop, spinner.call, "turn")
        try:
            if hop == "direct":
                spinner.call("turn")
            else:  # an AsyncSession inside an agent takes this hop
                asyncio.run(on_the_pool())
        except WasmextError as err:
            ended.append((err.reason, time.monotonic() - began))
        return "late"

    host.agents.register("stuck", stuck)
    plugin = add(host, "asker", {"op": "agents.request", "agent": "stuck", "input": 0,
                                 "timeout_ms": 300}, {"agents:stuck"})
    refused(plugin, "timeout", 2)
    deadline = time.monotonic() + 5
    while not ended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ended, "the abandoned run's plugin call was not cancelled"
    code, took = ended[0]
    assert code == "cancelled" and took < 3  # not the spinner's own 10 s
    healthy(host)


def test_an_answer_made_after_the_runs_deadline_is_not_delivered(
        host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline's alarm cancels the run; an agent that then answers anyway, before
    a late-waking waiter reads its future, has still not answered in time."""
    from concurrent.futures import Future

    cut = threading.Event()

    def stubborn(data: Any) -> Any:
        from wasmext.sandbox import callscope
        scope = callscope.current()
        assert scope is not None
        scope.cancelled.wait(5)  # set by the run's deadline alarm
        cut.set()
        return "after the deadline"

    pool = host.agents._pool
    submit = pool.submit

    def late_waker(*args: Any, **kwargs: Any) -> Future[Any]:
        future = submit(*args, **kwargs)
        # The waiter wakes only once the run has answered: a loaded machine's order.
        future.result = lambda timeout=None: (cut.wait(5), Future.result(future, 5))[1]  # type: ignore[method-assign]
        return future

    monkeypatch.setattr(pool, "submit", late_waker)
    host.agents.register("stubborn", stubborn)
    plugin = add(host, "waiter", {"op": "agents.request", "agent": "stubborn", "input": 0,
                                  "timeout_ms": 200}, {"agents:stubborn"})
    refused(plugin, "timeout", 3)
    assert cut.is_set()
    monkeypatch.undo()
    healthy(host)


def pool_relay(host: Host, pid: str, seen: list[dict[str, Any]]) -> Any:
    """An agent that runs plugin `pid`'s turn on the call pool, from an event loop."""
    def agent(data: Any) -> Any:
        async def hop() -> Any:
            loop = asyncio.get_running_loop()
            return await call_pool().submit(loop, host.plugins[pid].plugin.call, "turn")
        try:
            return {"value": asyncio.run(hop()).value}
        except PluginError as err:
            seen.append({"code": err.code, "message": err.message})
            return {"code": err.code}
    return agent


def session_relay(host: Host) -> Any:
    """An agent that runs `host`'s turn middleware through an AsyncSession."""
    def agent(data: Any) -> Any:
        async def turn() -> Any:
            async with host.asession(inline_below_ms=0) as s:
                return await s.middleware("turn", {"turn_id": "t", "messages": [],
                                                   "metadata": {}},
                                          lambda d: {"response": "core"})
        return asyncio.run(turn())
    return agent


@pytest.mark.parametrize("op", ["agents.send", "agents.request"])
def test_a_ping_pong_through_asession_and_the_call_pool_is_a_cycle(host: Host,
                                                                   op: str) -> None:
    # p asks ping; ping runs the other host's turn through an AsyncSession, where q
    # asks pong; pong runs p on the call pool, and p asks ping again: a cycle, though
    # each hop changed threads.
    seen: list[dict[str, Any]] = []
    runs: list[str] = []
    with make_host() as other:
        p = add(host, "p", {"op": op, "agent": "ping", "input": 0}, {"agents:ping"})
        add(other, "q", {"op": op, "agent": "pong", "input": 0}, {"agents:pong"})
        ping, pong = session_relay(other), pool_relay(host, "p", seen)
        host.agents.register("ping", lambda data: (runs.append("ping"), ping(data))[1])
        other.agents.register("pong", lambda data: (runs.append("pong"), pong(data))[1])
        started = time.monotonic()
        p.call("turn")
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert time.monotonic() - started < 3
        time.sleep(0.5)  # a ping-pong that got through would go on meanwhile
        assert runs == ["ping", "pong"]
        assert seen == [{"code": "limit", "message": "agent cycle: ping -> pong -> ping"}]
        healthy(host)


def test_timed_out_runs_keep_their_slots_so_threads_stay_bounded(host: Host) -> None:
    """Red team, held: each run is a daemon thread of its own, and a run that outlived
    its request's timeout_ms cannot be stopped. A plugin asking a stuck agent with a 50 ms
    timeout, 40 times, gets `timeout` four times (its share of the slots, each kept by its
    still-running thread) and `limit` after: the agent threads never pass the host's 16."""
    release, started_runs = threading.Event(), []
    host.agents.register("stuck", lambda data: (started_runs.append(data), release.wait(10)))
    asker = add(host, "asker", {"op": "agents.request", "agent": "stuck", "input": "x",
                                "timeout_ms": 50}, {"agents:stuck"})
    codes, most = [], 0
    started = time.monotonic()
    try:
        for _ in range(40):
            with pytest.raises(PluginError) as info:
                asker.call("turn")
            codes.append(info.value.code)
            most = max(most, sum(t.name.startswith("wasmext-agent-")
                                 for t in threading.enumerate()))
        assert time.monotonic() - started < 10
        assert codes[:4] == ["timeout"] * 4 and set(codes[4:]) == {"limit"}, codes
        assert len(started_runs) == 4 and most <= 4
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while any(t.name.startswith("wasmext-agent-") for t in threading.enumerate()) and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    healthy(host)  # the slots came back with their threads


@pytest.mark.parametrize("op", ["agents.request", "agents.send"])
def test_a_run_whose_thread_the_os_refuses_says_so_and_gives_its_slot_back(
        host: Host, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        op: str) -> None:
    """An agent run whose thread the OS would not start ("can't start new thread") was
    answered "the host is closing", which it was not. Now it is AgentRunNotStarted,
    `unavailable` "could not start a thread for the agent run", logged for the operator;
    every refused run gives its slot back (ten refusals, over the plugin's share of four,
    are never `limit`), and runs start again once threads do."""
    from wasmext.errors import AgentRunNotStarted, OpError
    from wasmext.services.agents import _Runs

    start = threading.Thread.start

    def refuse_agent_threads(thread: threading.Thread) -> None:
        if thread.name.startswith("wasmext-agent-"):
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse_agent_threads)
    with pytest.raises(AgentRunNotStarted) as info:
        _Runs("wasmext-agent").submit(lambda: None)
    assert isinstance(info.value, OpError) and info.value.code == "unavailable"

    plugin = add(host, "asker", {"op": op, "agent": "echo", "input": 1}, {"agents:echo"})
    with caplog.at_level("WARNING", logger="wasmext.services.agents"):
        for _ in range(10):
            message = refused(plugin, "unavailable", 2)
            assert message.startswith("could not start a thread for the agent run"), message
            assert "closing" not in message
    said = [r for r in caplog.records if r.name == "wasmext.services.agents"]
    assert said and "agent echo for plugin asker: could not start a thread" in \
        said[0].getMessage()
    assert said[0].plugin_id == "asker" and said[0].hook == "turn"  # type: ignore[attr-defined]
    monkeypatch.setattr(threading.Thread, "start", start)
    healthy(host)  # no slot was kept by a run that never started
