"""JSON mode (reference 003's `call_llm(json_mode=True)`) from the C SDK's
`wasmext_llm_complete_json`, the Zig SDK's `llmComplete(.{ .json_mode = true })` and
the Go SDK's `Completion{JSONMode: true}`, AssemblyScript's `Completion.jsonMode` and
Rust's `Completion { json_mode: true, .. }`, each in a real plugin (tests/plugins/mood-c,
zig-mood, go-mood, as-mood, rust-mood): the model is asked for a JSON object; the plain
wrapper asks for nothing of the kind."""

from __future__ import annotations

import pytest

from support import Built, run_cache
from wasmext import Host, Runtime
from wasmext.config import HostConfig
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmPolicy, LlmSettings


# The AssemblyScript and Rust builds take about 20 s each on a fresh machine: slow tier.
@pytest.mark.parametrize("plugin", ["mood-c", "zig-mood", "go-mood",
                                    pytest.param("as-mood", marks=pytest.mark.slow),
                                    pytest.param("rust-mood", marks=pytest.mark.slow)])
def test_the_sdk_asks_for_json_mode(built: Built, plugin: str) -> None:
    asked: list[ChatRequest] = []

    def model(req: ChatRequest) -> ChatAnswer:
        asked.append(req)
        return ChatAnswer('{"mood": "calm"}', "stop", 10, 5, "house-model")

    config = HostConfig(state_backend="memory",
                        llm=LlmSettings(model="house-model",
                                        default=LlmPolicy(timeout_ms=5_000)))
    with Host(config, runtime=Runtime(cache=run_cache()), plugin_dirs=[], llm=model) as host:
        host.add(built[plugin], plugin_id=plugin, grants={"llm"},
                 limits={"timeout_ms": 5_000})
        with host.session() as s:
            _, (mood, plain) = s.output_extensions("#mood #plain", "All is quiet.")
    assert mood.success and mood.content == '{"mood": "calm"}'
    assert plain.success and mood.usage == plain.usage == {"input": 10, "output": 5}
    assert [r.response_format for r in asked] == [{"type": "json_object"}, None]
    assert asked[0].messages == [{"role": "system", "content": "Rate the mood as JSON."},
                                 {"role": "user", "content": "All is quiet."}]
    assert asked[0].temperature == 0 and asked[1].temperature is None
