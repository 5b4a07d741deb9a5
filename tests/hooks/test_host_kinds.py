"""Tags, middleware, lifecycle, pipelines, output extensions, prompt additions
and tool guidance: each rule of docs/hooks.md pinned with real WASM plugins."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from support import Built
from wasmext import HookAborted, Host, PipelineError, Runtime, parse_policy
from wasmext.config import HostConfig
from wasmext.hooks.tags import parse
from wasmext.testing import DATA_AT, guest_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


def new_host() -> Host:
    return Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[])


def wat_plugin(host: Host, pid: str, hooks: list[dict[str, Any]], *, response: Any = None,
               body: str | None = None, data: bytes = b"", extra_reg: dict[str, Any] | None = None,
               failure: str | None = None) -> None:
    reg = {"hooks": hooks, **(extra_reg or {})}
    wat = guest_wat(body, response=response, registration=reg, data=data,
                    imports=HOST_CALL if body else "")
    import wasmtime

    host.add(bytes(wasmtime.wat2wasm(wat)), plugin_id=pid, failure=failure)


def next_body(times: int) -> tuple[str, bytes]:
    req = msgpack.packb({"op": "next", "metadata": {"seen": True}})
    calls = "".join(f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)})))"
                    for _ in range(times - 1))
    return calls + f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))", req


# -- tags ----------------------------------------------------------------------------

def test_tag_parser_keeps_unbalanced_text() -> None:
    assert "".join(p for p in parse("a </x> <y>b") if isinstance(p, str)) == "a </x> <y>b"


def test_tags_innermost_first_and_prefix_patterns(built: Built) -> None:
    host = new_host()
    host.add(built["test-kit"])
    with host.session() as s:
        out = s.process_tags('say <t1 a="1">x <t2>y</t2> <u>z</u></t1> and <t3>unclosed')
    assert out == "say t1(x t2(y) <u>z</u>) and <t3>unclosed"


def test_several_handlers_chain_and_failures_leave_the_tag(built: Built) -> None:
    host = new_host()
    host.add(built["test-kit"], plugin_id="first", priority=90)
    wat_plugin(host, "broken", [{"hook": "on_tag", "pattern": "t1"}], body="unreachable")
    host.add(built["test-kit"], plugin_id="second", priority=10)
    with host.session() as s:
        assert s.process_tags("<t1>a</t1>") == "t1(t1(a))"
    host2 = new_host()
    wat_plugin(host2, "broken", [{"hook": "on_tag", "pattern": "t1"}], body="unreachable")
    with host2.session() as s:
        assert s.process_tags("<t1>a</t1>") == "<t1>a</t1>"


# -- middleware ------------------------------------------------------------------------

def core_echo(data: dict[str, Any]) -> dict[str, Any]:
    return {"status": "ok", "output": data.get("args"), "seen": data.get("metadata")}


def test_middleware_calls_next_and_may_change_mutable_fields() -> None:
    host = new_host()
    body, req = next_body(1)
    wat_plugin(host, "outer", [{"hook": "tool_call"}], body=body, data=req)
    with host.session() as s:
        result = s.middleware("tool_call", {"tool": "calc", "args": {"x": 1}, "metadata": {}},
                              core_echo)
    assert result == {"status": "ok", "output": {"x": 1}, "seen": {"seen": True}}


def test_middleware_onion_order() -> None:
    host = new_host()
    body, req = next_body(1)
    calls: list[str] = []
    for pid, prio in (("inner", 10), ("outer", 90)):
        wat_plugin(host, pid, [{"hook": "step", "priority": prio}], body=body, data=req)
    original = host.call

    def spy(entry: Any, data: Any, session: Any = None) -> Any:
        calls.append(entry.plugin_id)
        return original(entry, data, session)

    host.call = spy  # type: ignore[method-assign]
    with host.session() as s:
        s.middleware("step", {"tools": [], "metadata": {}}, lambda d: {"response": "r"})
    assert calls == ["outer", "inner"]


@pytest.mark.parametrize("times", [0, 2])
def test_next_must_be_called_exactly_once(times: int) -> None:
    host = new_host()
    if times == 0:
        wat_plugin(host, "lazy", [{"hook": "turn"}], response={"ok": True, "value": {"x": 1}})
    else:
        body, req = next_body(2)
        wat_plugin(host, "greedy", [{"hook": "turn"}], body=body, data=req)
    core_calls = []

    def core(d: dict[str, Any]) -> dict[str, Any]:
        core_calls.append(d)
        return {"finish_reason": "text_response", "response": "hi"}

    with host.session() as s:
        result = s.middleware("turn", {"metadata": {}}, core)
        failed = [e for e in s.trace.events if e.outcome == "failed"]
    assert result == {"finish_reason": "text_response", "response": "hi"}
    assert len(core_calls) == 1, "the core runs once whatever the layer did"
    assert failed, "the broken layer is reported"


def test_middleware_fail_closed_aborts() -> None:
    host = new_host()
    wat_plugin(host, "lazy", [{"hook": "turn"}], response={"ok": True}, failure="closed")
    with host.session() as s, pytest.raises(HookAborted):
        s.middleware("turn", {"metadata": {}}, lambda d: {"response": "never"})


def test_next_outside_middleware_is_invalid() -> None:
    host = new_host()
    body, req = next_body(1)
    wat_plugin(host, "confused", [{"hook": "on_plain_text"}], body=body, data=req)
    with host.session() as s:
        result = s.on_plain_text("x")
    assert result.value == "x" and result.failed == ["confused"]


# -- lifecycle -------------------------------------------------------------------------

def test_lifecycle_continue_system_messages_and_outputs() -> None:
    host = new_host()
    wat_plugin(host, "a", [{"hook": "before_tool", "priority": 90}],
               response={"ok": True, "value": {"continue": True, "system_message": "one",
                                               "note": 1}})
    wat_plugin(host, "b", [{"hook": "before_tool", "priority": 80}],
               response={"ok": True, "value": "not a map"})
    wat_plugin(host, "c", [{"hook": "before_tool", "priority": 70}],
               response={"ok": True, "value": {"system_message": "two"}})
    wat_plugin(host, "d", [{"hook": "before_tool", "priority": 60}],
               response={"ok": True, "value": {"continue": False, "stop_reason": "no shell"}})
    wat_plugin(host, "e", [{"hook": "before_tool", "priority": 50}],
               response={"ok": True, "value": {"system_message": "never"}})
    with host.session() as s:
        result = s.lifecycle("before_tool", tool_name="shell", args={})
    assert result.proceed is False
    assert (result.stop_reason, result.stopped_by) == ("no shell", "d")
    assert result.system_message == "one\ntwo"
    assert result.outputs == [{"plugin": "a", "note": 1}]


def test_lifecycle_rejects_unknown_events_and_fields() -> None:
    host = new_host()
    with host.session() as s:
        with pytest.raises(ValueError, match="unknown lifecycle event"):
            s.lifecycle("before_lunch")
        with pytest.raises(ValueError, match="before_tool takes"):
            s.lifecycle("before_tool", tool="x")


# -- pipeline --------------------------------------------------------------------------

def pipeline_host(verdict: Any, *, validator_body: str | None = None) -> Host:
    host = new_host()
    wat_plugin(host, "pre", [{"hook": "pre"}], response={"ok": True, "value": {
        "message": {"payload": "pre-processed", "metadata": {"pre": True}}}})
    wat_plugin(host, "guard", [{"hook": "validator"}], body=validator_body,
               response={"ok": True, "value": verdict})
    wat_plugin(host, "prov", [{"hook": "provider"}], response={"ok": True, "value": {
        "message": {"payload": "provided", "metadata": {}}}})
    wat_plugin(host, "post-broken", [{"hook": "post"}], body="unreachable")
    return host


POLICY = {"policy_id": "p", "pre": [{"id": "pre"}], "validators": [{"id": "guard"}],
          "providers": ["missing", "prov"], "post": [{"id": "post-broken", "mode": "optional"}]}


def test_pipeline_runs_stages_in_order() -> None:
    host = pipeline_host({"status": "ok"})
    with host.session() as s:
        result = s.pipeline(parse_policy(POLICY), "raw")
    assert result.message == {"payload": "provided", "metadata": {}}
    assert result.provider == "prov"
    assert result.skipped == ["post-broken"]


@pytest.mark.parametrize(("on_fail", "blocked"), [("block", True), ("warn", False),
                                                  ("ignore", False)])
def test_validator_on_fail(on_fail: str, blocked: bool) -> None:
    host = pipeline_host({"status": "reject", "reason": "pii"})
    policy = parse_policy({**POLICY, "validators": [{"id": "guard", "on_fail": on_fail}]})
    with host.session() as s:
        if blocked:
            with pytest.raises(PipelineError, match="guard: pii"):
                s.pipeline(policy, "raw")
        else:
            result = s.pipeline(policy, "raw")
            assert result.warnings == (["guard: pii"] if on_fail == "warn" else [])


def test_validator_timeout_counts_as_reject() -> None:
    host = pipeline_host(None, validator_body="(loop (br 0)) (i64.const 0)")
    host.plugins["guard"].plugin = host.plugins["guard"].plugin.with_limits(
        host.plugins["guard"].plugin.limits.replace(timeout_ms=30, fuel_per_call=10**10))
    with host.session() as s, pytest.raises(PipelineError, match="timeout"):
        s.pipeline(parse_policy(POLICY), "raw")


def test_required_stage_failure_fails_the_run() -> None:
    host = pipeline_host({"status": "ok"})
    policy = parse_policy({**POLICY, "post": [{"id": "post-broken", "mode": "required"}]})
    with host.session() as s, pytest.raises(PipelineError, match="required post stage"):
        s.pipeline(policy, "raw")


def test_policy_validation() -> None:
    with pytest.raises(Exception, match="on_fail"):
        parse_policy({"validators": [{"id": "x", "on_fail": "explode"}]})
    with pytest.raises(Exception, match="unknown field"):
        parse_policy({"stages": []})


# -- output extensions, prompt, tool guidance ------------------------------------------

def test_output_extensions_chain_and_fail_alone() -> None:
    host = new_host()
    wat_plugin(host, "count", [{"hook": "output_extension", "pattern": "count"}],
               response={"ok": True, "value": 3})
    wat_plugin(host, "boom", [{"hook": "output_extension", "pattern": "boom"}],
               body="unreachable")
    with host.session() as s:
        clean, results = s.output_extensions("sum it up #count #boom:loud #unknown", "a b c")
    assert clean == "sum it up"
    assert [(r.name, r.param, r.success) for r in results] == [
        ("count", None, True), ("boom", "loud", False), ("unknown", None, False)]
    assert results[2].error == "no output extension #unknown"
    assert results[0].content == 3
    assert "trap" in (results[1].error or "")


def test_prompt_additions_are_ordered_by_plugin_id_and_conditional() -> None:
    host = new_host()
    prompt = [{"position": "system_suffix", "content": "from-b"},
              {"position": "user_prefix", "content": "[t] ", "when": {"tag_present": "t"}}]
    wat_plugin(host, "b", [], extra_reg={"prompt": prompt})
    wat_plugin(host, "a", [], extra_reg={"prompt": [
        {"position": "system_suffix", "content": "from-a"},
        {"position": "system_prefix", "content": "first",
         "when": {"state_equals": {"key": "mode", "value": "strict"}}}]})
    with host.session(state={"mode": "strict"}) as s:
        p = s.prompt("base", "question", tags=["t"])
    assert p.system == "first\nbase\nfrom-a\nfrom-b"
    assert p.user == "[t] question"
    with host.session() as s:
        p = s.prompt("base", "question")
    assert (p.system, p.user) == ("base\nfrom-a\nfrom-b", "question")


def test_tool_guidance_is_advice_only() -> None:
    host = new_host()
    wat_plugin(host, "g", [], extra_reg={"tool_guidance": {
        "preferred": ["calc"], "avoided": ["shell", "ghost"], "order": ["clock", "calc"]}})
    with host.session() as s:
        g = s.tool_guidance(["shell", "clock", "calc"])
    assert g.tools == ["calc", "clock", "shell"]
    assert (g.preferred, g.avoided, g.order) == (["calc"], ["shell"], ["clock", "calc"])
    assert "Prefer these tools: calc." in g.text()
