"""Output extensions as the reference describes them: declared params, unknown
names, timing, model usage and cost, content types, and the `extension.result`
event."""

from __future__ import annotations

from typing import Any

import msgpack
import wasmtime

from wasmext import Host, Runtime
from wasmext.config import HostConfig
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmSettings, Price
from wasmext.testing import DATA_AT, guest_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
SUMMARY_REG = {"abi_minor": 1,
               "hooks": [{"hook": "output_extension", "pattern": "summary"}],
               "output_extensions": [{"name": "summary", "allowed_params": ["short", "long"],
                                      "content_type": "application/json"}]}


def summary_wasm() -> bytes:
    """Answers every output_extension call with the host's llm.complete answer map."""
    raw = msgpack.packb({"op": "llm.complete", "max_tokens": 50, "messages": [
        {"role": "user", "content": "Summarise as JSON."}]})
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                    imports=HOST_CALL, data=raw, registration=SUMMARY_REG)
    return bytes(wasmtime.wat2wasm(wat))


def model(req: ChatRequest) -> ChatAnswer:
    return ChatAnswer('{"summary": "three words"}', "stop", 40, 10, req.model)


def make() -> Host:
    config = HostConfig(llm=LlmSettings(model="m", prices={"m": Price(1.0, 2.0)}),
                        state_backend="memory")
    host = Host(config, runtime=Runtime(cache=False), plugin_dirs=[], llm=model)
    host.add(summary_wasm(), plugin_id="summarizer", grants={"llm"})
    return host


def test_results_carry_usage_cost_timing_and_type() -> None:
    events: list[dict[str, Any]] = []
    with make() as host:
        host.observe.bus.subscribe("extension.result", lambda e: events.append(e.payload))
        with host.session("s1") as s:
            clean, results = s.output_extensions("tell me #summary:short", "a b c")
        assert host.observe.bus.flush(5)
    assert clean == "tell me"
    (r,) = results
    assert r.success and r.plugin_id == "summarizer"
    assert r.content["text"] == '{"summary": "three words"}'
    assert r.usage == {"input": 40, "output": 10}
    assert r.cost == (40 * 1.0 + 10 * 2.0) / 1e6 == r.content["cost"]
    assert r.content_type == "application/json" and r.duration_ms > 0
    assert r.as_dict()["usage"] == {"input": 40, "output": 10}
    assert [(e["name"], e["param"], e["success"], e["session_id"], e["cost"])
            for e in events] == [("summary", "short", True, "s1", r.cost)]


def test_params_outside_allowed_params_are_refused_without_a_call() -> None:
    with make() as host, host.session() as s:
        _, results = s.output_extensions("#summary:everything", "a b c")
        assert host.llm.usage("summarizer")["tokens"] == {}
    (r,) = results
    assert not r.success and "not allowed" in (r.error or "")


def test_unknown_names_are_error_results_stripped_from_the_query() -> None:
    with make() as host, host.session() as s:
        clean, results = s.output_extensions("see #nothing and #summary issue #42", "x")
    assert clean == "see and issue #42"
    assert [(r.name, r.success) for r in results] == [("nothing", False), ("summary", True)]
