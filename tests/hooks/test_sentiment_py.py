"""The Python guest SDK's output-extension helpers inside a real component
(plugins/sentiment-py): JSON mode to the model, the first JSON object read from a
fenced answer, result builders unwrapped by the host, error_result failing only
its own result."""

from __future__ import annotations

from typing import Any

from support import Built
from wasmext import Host, Runtime
from wasmext.config import HostConfig
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmPolicy, LlmSettings


def test_helpers_in_a_python_component(built: Built) -> None:
    answers = iter(['Sure!\n```json\n{"sentiment": "positive", "confidence": 0.9}\n```',
                    "I would rather not say."])
    asked: list[ChatRequest] = []

    def model(req: ChatRequest) -> ChatAnswer:
        asked.append(req)
        return ChatAnswer(next(answers), "stop", 30, 12, "house-model")

    config = HostConfig(state_backend="memory",
                        llm=LlmSettings(model="house-model",
                                        default=LlmPolicy(timeout_ms=10_000)))
    with Host(config, runtime=Runtime(cache=False), plugin_dirs=[], llm=model) as host:
        host.add(built["sentiment-py"], plugin_id="sentiment-py", grants={"llm"},
                 limits={"timeout_ms": 10_000})
        with host.session() as s:
            _, first = s.output_extensions("#stats #sentiment #stats:brief",
                                           "Great work. It all passed!")
            _, (failed,) = s.output_extensions("#sentiment", "Meh.")
    out: dict[str, Any] = {r.name + (r.param or ""): r for r in first}
    stats, sentiment, brief = out["stats"], out["sentiment"], out["statsbrief"]
    assert stats.content == {"words": 5, "sentences": 2, "earlier": []}
    assert stats.metadata["plugin"] == {"helper": "wasmext_guest.helpers"}
    assert stats.output_target == "silent" and stats.content_type == "application/json"
    assert sentiment.content == {"sentiment": "positive", "confidence": 0.9}
    assert sentiment.metadata["plugin"] == {"model": "house-model"}
    assert sentiment.output_target == "status_panel"
    assert sentiment.usage == {"input": 30, "output": 12}
    assert brief.content == {"words": 5}
    assert asked[0].response_format == {"type": "json_object"}
    assert not failed.success and "no JSON object" in (failed.error or "")
