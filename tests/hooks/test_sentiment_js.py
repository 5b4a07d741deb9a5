"""The JavaScript guest SDK's output-extension helpers inside a real plugin
(tests/plugins/sentiment-js): JSON mode to the model, the first JSON object read
from a fenced answer, result builders unwrapped by the host, errorResult failing
only its own result, and the helpers' counts."""

from __future__ import annotations

from typing import Any

import pytest

from support import Built
from wasmext import Host, Runtime
from wasmext.config import HostConfig
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmPolicy, LlmSettings


@pytest.mark.slow  # a componentize-js build and a 12 MB component compiled: over a minute
def test_helpers_in_a_javascript_plugin(built: Built) -> None:
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
        host.add(built["sentiment-js"], plugin_id="sentiment-js", grants={"llm"},
                 limits={"timeout_ms": 10_000})
        with host.session() as s:
            _, first = s.output_extensions("#stats #sentiment #stats:brief #stats:loud",
                                           "Great work. It all passed!")
            _, (failed,) = s.output_extensions("#sentiment", "Meh.")
    out: dict[str, Any] = {r.name + (r.param or ""): r for r in first}
    stats, sentiment, brief, loud = (out["stats"], out["sentiment"], out["statsbrief"],
                                     out["statsloud"])
    assert stats.content == {"words": 5, "sentences": 2, "preview": "Great…",
                             "earlier": []}
    assert stats.metadata["plugin"] == {"helper": "wasmext (javascript)"}
    assert stats.output_target == "silent" and stats.content_type == "application/json"
    assert sentiment.content == {"sentiment": "positive", "confidence": 0.9}
    assert sentiment.metadata["plugin"] == {"model": "house-model"}
    assert sentiment.output_target == "status_panel"
    assert sentiment.usage == {"input": 30, "output": 12}
    assert brief.content == {"words": 5}
    assert not loud.success and "not allowed" in (loud.error or "")  # allowed_params
    assert asked[0].response_format == {"type": "json_object"}
    assert len(asked) == 2  # #stats never asked the model
    assert not failed.success and "no JSON object" in (failed.error or "")
