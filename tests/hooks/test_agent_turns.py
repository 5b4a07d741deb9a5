"""Agent turns as the agent-runtime seed describes them: the turn events carry the
real step count and the session's agent name, a broken middleware layer is a
MiddlewareError in the trace and the fault record, and events still queued when the
host closes reach the plugins subscribed to them."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgpack
import pytest
import wasmtime

from wasmext import Host, Runtime
from wasmext.agent import Agent, Tool
from wasmext.config import HostConfig
from wasmext.errors import LoadError
from wasmext.models import ReplayModel, Transcript
from wasmext.observe.events import Event
from wasmext.testing import DATA_AT, guest_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
NEXT = msgpack.packb({"op": "next"})


def new_host() -> Host:
    return Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[])


def layer(kind: str, *, times: int = 1, answer: Any = None) -> bytes:
    """A `kind` middleware layer calling next `times` times, then answering `answer`
    (None: the inner result unchanged)."""
    calls = "".join(f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(NEXT)})))"
                    for _ in range(times))
    resp = {"ok": True} if answer is None else {"ok": True, "value": answer}
    from wasmext.testing import RESPONSE_AT, packed

    body = calls + f"(i64.const {packed(RESPONSE_AT, len(msgpack.packb(resp)))})"
    wat = guest_wat(body, response=resp, imports=HOST_CALL, data=NEXT,
                    registration={"hooks": [{"hook": kind}]})
    return bytes(wasmtime.wat2wasm(wat))


def listener(patterns: list[str], spin: int = 0) -> bytes:
    """An on_event plugin subscribed to `patterns`; each event costs `spin` loop rounds."""
    body = f"""(local $i i32)
    (block $done (loop $again
      (br_if $done (i32.ge_u (local.get $i) (i32.const {spin})))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $again)))
    (i64.const 0)"""
    wat = guest_wat(body, registration={"hooks": [{"hook": "on_event"}],
                                        "subscriptions": patterns})
    return bytes(wasmtime.wat2wasm(wat))


TWO_STEPS = Transcript({"model": "replay", "system": "s", "turns": [
    {"user": "add", "steps": [
        {"response": "", "tool_calls": [{"tool": "echo", "args": {"x": 1}}]},
        {"response": "done"}]},
    {"user": "again", "steps": [{"response": "short"}]}]})
ECHO = {"echo": Tool("echo", "Echo the arguments.", lambda a: a)}


def test_turn_events_carry_the_step_count_and_the_sessions_agent_name() -> None:
    host = new_host()
    host.add(layer("step"), plugin_id="stepper")
    host.add(listener(["turn.*", "step.*", "tool.*"]), plugin_id="audit",
             grants={"events", "subscribe:turn.*", "subscribe:step.*", "subscribe:tool.*"})
    seen: list[Event] = []
    lock = threading.Lock()

    def keep(event: Event) -> None:
        with lock:
            seen.append(event)

    for pattern in ("turn.*", "step.*", "tool.*"):
        host.observe.bus.subscribe(pattern, keep)
    with host, host.session() as s:
        agent = Agent(host, ReplayModel(TWO_STEPS), tools=ECHO, name="support-bot")
        reports = [agent.run_turn(s, i, t["user"]) for i, t in enumerate(TWO_STEPS.turns)]
        assert host.observe.bus.flush(10)
    assert [r.response for r in reports] == ["done", "short"]
    completed = [e.payload for e in seen if e.topic == "turn.completed"]
    assert [c["step_count"] for c in completed] == [2, 1]
    named = {e.payload["agent_name"] for e in seen}
    assert named == {"support-bot"}
    assert {e.topic for e in seen} >= {"turn.started", "step.started", "tool.called",
                                       "tool.completed", "turn.completed"}


def test_an_agent_name_the_application_set_wins() -> None:
    host = new_host()
    names: list[str] = []
    host.observe.bus.subscribe("turn.*", lambda e: names.append(e.payload["agent_name"]))
    with host, host.session() as s:
        s.context["agent_name"] = "billing"
        Agent(host, ReplayModel(TWO_STEPS), tools=ECHO).run_turn(s, 1, "again")
        assert host.observe.bus.flush(10)
    assert names == ["billing", "billing"]


def core(d: dict[str, Any]) -> dict[str, Any]:
    return {"response": "inner", "finish_reason": "text_response"}


def test_a_layer_calling_next_twice_is_a_middleware_error_in_trace_and_faults() -> None:
    host = new_host()
    host.add(layer("turn", times=2, answer={"response": "from the greedy layer",
                                            "finish_reason": "text_response"}),
             plugin_id="greedy")
    host.add(layer("turn"), plugin_id="fine")
    with host, host.session() as s:
        result = s.middleware("turn", {"turn_id": "t", "metadata": {}}, core)
        failed = [e for e in s.trace.events if e.outcome == "failed"]
        faults = [(f.plugin_id, f.hook, f.reason) for f in host.faults]
        # the plugin still answers the next turn
        assert s.middleware("turn", {"turn_id": "t2", "metadata": {}}, core)["response"] \
            == "inner"
    assert result == {"response": "inner", "finish_reason": "text_response"}
    assert [(e.plugin_id, e.hook) for e in failed] == [("greedy", "turn")]
    assert "next more than once" in (failed[0].detail or "")
    assert faults[0] == ("greedy", "turn", "middleware")


def test_a_layer_answer_is_checked_against_the_result_shape() -> None:
    host = new_host()
    host.add(layer("turn", answer={"response": 42}), plugin_id="wrong-type")
    host.add(layer("turn", answer={"finish_reason": "text_response"}, ), plugin_id="no-text")
    host.add(layer("tool_call", answer={"output": 1}), plugin_id="no-status")
    with host, host.session() as s:
        turn = s.middleware("turn", {"turn_id": "t", "metadata": {}}, core)
        tool = s.middleware("tool_call", {"tool": "x", "args": {}, "metadata": {}},
                            lambda d: {"status": "ok", "output": 2})
        details = {e.plugin_id: e.detail for e in s.trace.events if e.outcome == "failed"}
    assert turn == {"response": "inner", "finish_reason": "text_response"}
    assert tool == {"status": "ok", "output": 2}
    assert "wrong type" in details["wrong-type"]
    assert "lacks 'response'" in details["no-text"]
    assert "lacks 'status'" in details["no-status"]
    assert {f.reason for f in host.faults} == {"middleware"}


def test_a_well_shaped_answer_becomes_the_result() -> None:
    host = new_host()
    host.add(layer("turn", answer={"response": "rewritten", "finish_reason": "text_response",
                                   "audited": True}), plugin_id="rewriter")
    with host, host.session() as s:
        result = s.middleware("turn", {"turn_id": "t", "metadata": {}}, core)
    assert result == {"response": "rewritten", "finish_reason": "text_response",
                      "audited": True}
    assert host.faults == []


def test_events_queued_at_close_reach_the_plugins_subscribed_to_them() -> None:
    host = new_host()
    lp = host.add(listener(["turn.*"], spin=3_000_000), plugin_id="slow-audit",
                  grants={"events", "subscribe:turn.*"})
    for n in range(12):
        host.observe.bus.emit_runtime("turn.started", turn_id=f"t{n}", agent_name="a",
                                      instance_key="k")
    started = time.monotonic()
    host.close()
    assert time.monotonic() - started < 30
    assert lp.calls == 12


def guide(extra: dict[str, Any]) -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat(registration={"hooks": [], **extra})))


@pytest.mark.parametrize(("extra", "field"), [
    ({"prompt": [{"position": "nowhere", "content": "x"}]}, "prompt[0].position"),
    ({"prompt": [{"position": "system_prefix"}]}, "prompt[0].content"),
    ({"prompt": [{"position": "user_suffix", "content": "x", "when": {"tag": "t"}}]},
     "prompt[0].when"),
    ({"prompt": [{"position": "user_suffix", "content": "x",
                  "when": {"context_match": {"key": "k", "pattern": "(["}}}]},
     "prompt[0].when"),
    ({"prompt": "Be brief."}, "prompt"),
    ({"tool_guidance": {"preferred": ["calc", "no spaces allowed"]}},
     "tool_guidance.preferred[1]"),
    ({"tool_guidance": {"prefered": ["calc"]}}, "tool_guidance.prefered"),
])
def test_a_bad_prompt_addition_or_guidance_is_a_load_error_naming_the_field(
        extra: dict[str, Any], field: str) -> None:
    host = new_host()
    with pytest.raises(LoadError) as info:
        host.add(guide(extra), plugin_id="sloppy")
    assert info.value.plugin_id == "sloppy"
    assert f"plugin sloppy: registration field '{field}'" in info.value.message
    assert "sloppy" not in host.plugins and "sloppy" not in host.runtime.plugins
    host.add(guide({"prompt": [{"position": "system_suffix", "content": "fine"}]}),
             plugin_id="sloppy")  # the id is free again; a healthy plugin loads
    with host, host.session() as s:
        assert s.prompt("base", "q").system == "base\nfine"


def test_guidance_naming_an_unknown_tool_is_reported_once_the_catalog_is_known() -> None:
    host = new_host()
    host.add(guide({"tool_guidance": {"preferred": ["echo"], "avoided": ["ghost"]}}),
             plugin_id="guide")
    with host:
        agent = Agent(host, ReplayModel(TWO_STEPS), tools=ECHO)
        said = [e.message for e in host.load_errors]
        assert said == ["plugin guide: field 'tool_guidance.avoided[0]': no tool 'ghost' "
                        "in the registry"]
        with host.session() as s:
            agent.run_turn(s, 1, "again")
            assert ("guide", "unknown tool", "ghost") in [
                (e.plugin_id, e.outcome, e.detail) for e in s.trace.events]
        Agent(host, ReplayModel(TWO_STEPS), tools=ECHO)
        assert len(host.load_errors) == 1, "said once"


def kb_plugin(help_url: str) -> bytes:
    error = {"code": "not_found", "message": "no such article",
             "suggestion": "Try a shorter query.", "help_url": help_url}
    wat = guest_wat(response={"ok": False, "error": error},
                    registration={"hooks": [{"hook": "on_tool"}],
                                  "tools": [{"name": "lookup", "description": "Find."}]})
    return bytes(wasmtime.wat2wasm(wat))


KB_TURN = Transcript({"model": "replay", "system": "s", "turns": [
    {"user": "look it up", "steps": [
        {"response": "", "tool_calls": [{"tool": "kb__lookup", "args": {}},
                                        {"tool": "echo", "args": {"x": 1}}]},
        {"response": "not found"}]}]})


def test_messages_carry_ids_and_sources_and_steps_their_results() -> None:
    host = new_host()
    host.add(kb_plugin("https://docs.example.org/kb#lookup"), plugin_id="kb")
    with host, host.session() as s:
        [report] = [Agent(host, ReplayModel(KB_TURN), tools=ECHO).run_turn(s, 0, "look it up")]
        messages = list(s.messages)
    assert [m["source"]["type"] for m in messages] == [
        "user", "assistant", "tool", "tool", "assistant"]
    assert len({m["id"] for m in messages}) == 5
    assert all(m["created_at"].endswith("+00:00") for m in messages)
    assert messages[2]["source"] == {"type": "tool", "tool_call_id": "call-0-0-0",
                                     "tool_name": "kb__lookup"}
    first, last = report.steps
    assert (first["status"], first["has_tool_calls"], first["metadata"]) == \
        ("completed", True, {})
    kb, echo = first["tool_results"]
    assert (kb["tool_call_id"], kb["tool_name"], kb["status"]) == \
        ("call-0-0-0", "kb__lookup", "error")
    assert kb["error"] == {"code": "not_found", "message": "no such article",
                           "suggestion": "Try a shorter query.",
                           "help_url": "https://docs.example.org/kb#lookup"}
    assert (echo["status"], echo["output"]) == ("ok", {"x": 1})
    assert (last["has_tool_calls"], last["tool_results"]) == (False, [])
    assert report.tool_calls[0]["result"]["error"]["suggestion"] == "Try a shorter query."


def test_a_help_url_that_is_no_web_address_is_dropped() -> None:
    host = new_host()
    host.add(kb_plugin("javascript:alert(1)"), plugin_id="kb")
    with host:
        result = host.tools.execute("kb__lookup", {})
    assert result["error"]["suggestion"] == "Try a shorter query."
    assert "help_url" not in result["error"]


def test_every_turn_event_of_a_session_reaches_a_slow_plugin_before_close() -> None:
    host = new_host()
    lp = host.add(listener(["turn.*", "step.*"], spin=1_000_000), plugin_id="slow-audit",
                  grants={"events", "subscribe:turn.*", "subscribe:step.*"})
    topics: list[str] = []
    host.observe.bus.subscribe("turn.*", lambda e: topics.append(e.topic))
    host.observe.bus.subscribe("step.*", lambda e: topics.append(e.topic))
    with host.session() as s:
        agent = Agent(host, ReplayModel(TWO_STEPS), tools=ECHO)
        for i, t in enumerate(TWO_STEPS.turns):
            agent.run_turn(s, i, t["user"])
    host.close()  # no flush of our own: close delivers what is queued
    assert len(topics) == 10  # 2 turns x (started, completed) + 3 steps x 2
    assert lp.calls == 10
