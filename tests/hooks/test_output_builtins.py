"""Reference 003's built-in set as the C plugin plugins/output-builtins: #json shows
the level-2 context the host gives every extension, #extract is deterministic,
#decision, #classify and #summary ask the host's model in JSON mode (a real
loopback endpoint) and parse its answer; the agent fills in provider, model,
tokens and tools used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopback import Loopback
from support import Built
from wasmext import Host, Runtime
from wasmext.agent import Agent, Tool
from wasmext.config import HostConfig
from wasmext.models import ReplayModel, Transcript
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmPolicy, LlmSettings, Price


def new_host(built: Built, llm: Any = None, url: str | None = None) -> Host:
    settings = LlmSettings(url=url, model="m", prices={"m": Price(1.0, 2.0)},
                           default=LlmPolicy(timeout_ms=5000))
    host = Host(HostConfig(state_backend="memory", llm=settings), runtime=Runtime(cache=False),
                plugin_dirs=[], llm=llm)
    host.add(built["output-builtins"], plugin_id="output-builtins", grants={"llm"},
             limits={"timeout_ms": 5000})
    return host


def run(host: Host, query: str, answer: str, context: dict[str, Any] | None = None,
        user: str | None = None) -> dict[str, dict[str, Any]]:
    with host.session("sess-1") as s:
        s.context["turn_id"] = "turn-3"
        s.user_id = user
        _, results = s.output_extensions(query, answer, context)
    return {r.name: r.as_dict() for r in results}


def test_json_carries_the_level_2_context(built: Built) -> None:
    context = {"provider": "openai", "model": "m", "tokens": {"input": 30, "output": 9},
               "tools_used": ["calc"], "child_results": {"reviewer": {"verdict": "fine"}},
               "collected_data": [1, 2], "secret_of_the_app": "never shown"}
    with new_host(built) as host:
        default, minimal = (run(host, q, "A.", context)["json"] for q in ("#json",
                                                                         "#json:minimal"))
        with host.session("sess-2") as s:
            s.trace.note("turn", "begin turn 0", "a detail only the host sees", "some-plugin")
            _, (full,) = s.output_extensions("How busy? #json:full", "A.", context)
    assert default["output_target"] == "chat_append" and default["success"]
    assert default["content"] == {
        "query": "", "answer": "A.", "session_id": "sess-1", "turn_id": "turn-3",
        "user_id": None, "provider": "openai", "model": "m",
        "tokens": {"input": 30, "output": 9}, "tools_used": ["calc"]}
    assert minimal["content"] == {"query": "", "answer": "A."}
    assert full.content["query"] == "How busy?"
    assert full.content["child_results"] == {"reviewer": {"verdict": "fine"}}
    assert full.content["collected_data"] == [1, 2]
    assert full.content["execution_trace"] == [
        {"hook": "turn", "plugin": "some-plugin", "outcome": "begin turn 0"}]
    assert "never shown" not in json.dumps(full.content)
    assert "only the host sees" not in json.dumps(full.content)


def test_extract_finds_labeled_numbers_percentages_and_entities(built: Built) -> None:
    answer = ("DW_PROD and DW_DEV report.\nCPU Usage: 94.5% on DW_PROD; Memory: 87.5 GB, "
              "Total: 1,234 rows, Load: 3; at 12.5%. THE SQL API said OK about DW_DEV, ab12.")
    with new_host(built) as host:
        out = run(host, "#extract", answer)["extract"]
        only = run(host, "#extract:entities", answer)["extract"]
        numbers = run(host, "#extract:numbers", answer)["extract"]
        bad = run(host, "#extract:words", answer)["extract"]
    assert out["content"] == {
        "numbers": [{"label": "CPU Usage", "value": 94.5, "unit": "%"},
                    {"label": "Memory", "value": 87.5, "unit": "GB"},
                    {"label": "Total", "value": 1234.0, "unit": "rows"},
                    {"label": "Load", "value": 3.0, "unit": None}],
        "percentages": [94.5, 12.5],
        # UPPER_CASE identifiers of 3+ characters, once each, without 003's stop-words
        "entities": ["DW_PROD", "DW_DEV"],
        "source_length": len(answer)}
    assert out["output_target"] == "silent" and out["usage"] == {}
    assert out["metadata"]["output_schema"] == "valid"  # its declared output_schema
    assert only["content"] == {"entities": ["DW_PROD", "DW_DEV"]}
    assert numbers["content"] == {"numbers": out["content"]["numbers"]}
    assert not bad["success"] and "not allowed" in (bad["error"] or "")


def test_extract_stays_bounded_on_a_hostile_answer(built: Built) -> None:
    answer = "A: 1 " * 5000 + "ABC_" * 10 + " " + " ".join(f"ID_{i:04d}" for i in range(2000))
    with new_host(built) as host:
        out = run(host, "#extract", answer)["extract"]
    assert out["success"], out["error"]
    assert len(out["content"]["numbers"]) == 256 and len(out["content"]["entities"]) == 256


def test_the_model_extensions_use_json_mode_and_parse_the_answer(built: Built,
                                                                 server: Loopback) -> None:
    decision = {"result": "threshold_exceeded", "severity": "critical", "confidence": 0.92,
                "action_recommended": True, "branch_key": "threshold_exceeded_critical",
                "reasoning": "CPU at 94% \u00e9 \U0001F600 \"q\"\n"}
    server.server.completion.update(
        text="Here you go:\n```json\n" + json.dumps(decision) + "\n```", usage=(600, 60))
    with new_host(built, url=server.url("/v1")) as host:
        out = run(host, "#extract #decision:critical", "CPU usage is at 94%.")
        sent = [json.loads(s["body"]) for s in server.seen
                if s["path"] == "/v1/chat/completions"]
        server.server.completion.update(text="I cannot answer in JSON, sorry.")
        broken = run(host, "#classify #summary:detailed", "x")
    assert out["decision"]["content"] == decision
    assert out["decision"]["usage"] == {"input": 600, "output": 60}
    assert out["decision"]["cost"] == pytest.approx((600 * 1.0 + 60 * 2.0) / 1e6)
    (request,) = sent
    assert request["response_format"] == {"type": "json_object"}
    assert "CPU usage is at 94%." in request["messages"][1]["content"]
    for name in ("classify", "summary"):
        assert not broken[name]["success"]
        assert "no JSON object" in (broken[name]["error"] or "")


def test_classify_and_summary_against_a_python_model(built: Built) -> None:
    asked: list[ChatRequest] = []

    def model(req: ChatRequest) -> ChatAnswer:
        asked.append(req)
        if "classify" in req.messages[0]["content"]:
            return ChatAnswer('{"primary_category": "performance", "confidence": 0.87, '
                              '"all_categories": {"performance": 8, "alert": 3}, '
                              '"branch_key": "performance", "reasoning": "CPU"}', "stop", 50, 30)
        return ChatAnswer('{"summary": "All nominal.", "key_points": ["CPU 45%"], '
                          '"action_items": [], "nested": [[[-1.5e0, null, false]]]}',
                          "stop", 50, 20)

    usage: list[dict[str, Any]] = []
    with new_host(built, llm=model) as host:
        host.observe.bus.subscribe("extension.usage", lambda e: usage.append(e.payload))
        out = run(host, "#classify #summary", "CPU at 45%, memory 62%.",
                  {"tokens": {"input": 1000, "output": 100}})
        assert host.observe.bus.flush(5)
    # the turn's aggregate: both extensions' model use, and with the turn's own tokens
    (turn,) = usage
    assert (turn["input_tokens"], turn["output_tokens"], turn["count"]) == (100, 50, 2)
    assert (turn["turn_input_tokens"], turn["turn_output_tokens"]) == (1100, 150)
    assert turn["cost"] == pytest.approx((100 * 1.0 + 50 * 2.0) / 1e6)
    assert out["classify"]["content"]["primary_category"] == "performance"
    assert out["classify"]["content"]["all_categories"] == {"performance": 8, "alert": 3}
    assert out["summary"]["content"] == {"summary": "All nominal.", "key_points": ["CPU 45%"],
                                         "action_items": [], "nested": [[[-1.5, None, False]]]}
    assert out["summary"]["output_target"] == "chat_append"
    assert [r.response_format for r in asked] == [{"type": "json_object"}] * 2


def test_wasmext_run_agent_fills_in_the_turns_context(built: Built, tmp_path: Path) -> None:
    script = Transcript({"model": "replay-model", "system": "s", "turns": [{
        "user": "Add them #json #json2", "steps": [
            {"response": "", "tool_calls": [{"call_id": "c1", "tool": "calc",
                                              "args": {"expression": "1+2"}}]},
            {"response": "It is 3."}]}]})
    with new_host(built) as host:
        host.extensions.activate("ada", "json")
        host.extensions.activate("ada", "json", default_param="minimal")
        agent = Agent(host, ReplayModel(script), tools={
            "calc": Tool("calc", "add", lambda a: 3)})
        with host.session("run-1") as s:
            s.user_id = "ada"
            report = agent.run_turn(s, 0, "Add them #json #json2")
        (saved,) = host.extensions.history("run-1")
    first, second = report.extensions
    assert first["content"]["provider"] == "ReplayModel"
    assert first["content"]["model"] == "replay-model"
    assert first["content"]["tools_used"] == ["calc"]
    assert first["content"]["user_id"] == "ada" and first["content"]["turn_id"] == "turn-0"
    tokens = first["content"]["tokens"]
    assert tokens["output"] > 0 and tokens["total_output"] == tokens["output"]
    assert set(tokens) == {"input", "output", "total_input", "total_output"}
    assert second["name"] == "json2" and second["param"] == "minimal"
    assert second["content"] == {"query": "Add them", "answer": "It is 3."}
    assert saved["results"] == report.extensions


def test_an_async_session_passes_the_context_on(built: Built) -> None:
    import asyncio

    async def main(host: Host) -> dict[str, Any]:
        async with host.asession("async-1") as s:
            s.sync.context["turn_id"] = "turn-9"
            _, (result,) = await s.output_extensions("#json", "A.", {"model": "m2"})
        return result.as_dict()

    with new_host(built) as host:
        out = asyncio.run(main(host))
        (saved,) = host.extensions.history("async-1")
    assert (out["content"]["model"], out["content"]["turn_id"]) == ("m2", "turn-9")
    assert saved["results"] == [out]


def test_child_agent_results_reach_the_turns_extensions(built: Built) -> None:
    import msgpack
    import wasmtime

    from wasmext.testing import DATA_AT, guest_wat

    def asking(agent: str) -> bytes:
        raw = msgpack.packb({"op": "agents.request", "agent": agent, "input": "the draft"})
        wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                        imports='(import "wasmext" "host_call" (func $host_call '
                                '(param i32 i32) (result i64)))', data=raw,
                        registration={"hooks": [{"hook": "turn"}], "abi_minor": 1})
        return bytes(wasmtime.wat2wasm(wat))

    def broken(data: Any) -> Any:
        raise RuntimeError("the secret database password is hunter2")

    with new_host(built) as host:
        host.agents.register("reviewer", lambda text: {"verdict": "fine", "saw": text})
        host.agents.register("broken", broken)
        for pid, agent in (("review-layer", "reviewer"), ("broken-layer", "broken")):
            host.add(asking(agent), plugin_id=pid, grants={"agents", f"agents:{agent}"})
        with host.session("agents-1") as s:
            s.middleware("turn", {"turn_id": "t", "input": {}, "messages": [], "metadata": {}},
                         lambda d: {"finish_reason": "text_response", "response": "ok"})
            _, (first,) = s.output_extensions("#json:full", "ok")
            _, (second,) = s.output_extensions("#json:full", "ok")
    children = first.content["child_results"]
    assert [(c["agent"], c["requested_by"], c["success"]) for c in children] == [
        ("reviewer", "review-layer", True), ("broken", "broken-layer", False)]
    assert children[0]["output"] == {"verdict": "fine", "saw": "the draft"}
    assert children[1]["error"] == "failed: RuntimeError" and children[1]["output"] is None
    assert "hunter2" not in json.dumps(first.content)
    assert second.content["child_results"] == []  # each turn sees its own runs
