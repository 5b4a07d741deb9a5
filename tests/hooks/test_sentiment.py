"""The Python and JavaScript guest SDKs' output-extension helpers inside real
components (plugins/sentiment-py, tests/plugins/sentiment-js): JSON mode to the
model, the first JSON object read from a fenced answer, result builders unwrapped
by the host, an error result failing only its own result, and the helpers' counts."""

from __future__ import annotations

from typing import Any

import pytest

from support import Built
from wasmext import ExtensionResult, Host, Runtime
from wasmext.config import HostConfig
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmPolicy, LlmSettings


def run_sentiment(built: Built, runtime: Runtime, name: str, query: str
                  ) -> tuple[dict[str, ExtensionResult], ExtensionResult, list[ChatRequest]]:
    """One turn's extensions from `query`, then a `#sentiment` whose model answer has
    no JSON: (the first turn's results by name+param, the failed one, what the model
    was asked)."""
    answers = iter(['Sure!\n```json\n{"sentiment": "positive", "confidence": 0.9}\n```',
                    "I would rather not say."])
    asked: list[ChatRequest] = []

    def model(req: ChatRequest) -> ChatAnswer:
        asked.append(req)
        return ChatAnswer(next(answers), "stop", 30, 12, "house-model")

    config = HostConfig(state_backend="memory",
                        llm=LlmSettings(model="house-model",
                                        default=LlmPolicy(timeout_ms=10_000)))
    with Host(config, runtime=runtime, plugin_dirs=[], llm=model) as host:
        host.add(built[name], plugin_id=name, grants={"llm"}, limits={"timeout_ms": 10_000})
        with host.session() as s:
            _, first = s.output_extensions(query, "Great work. It all passed!")
            _, (failed,) = s.output_extensions("#sentiment", "Meh.")
    out: dict[str, Any] = {r.name + (r.param or ""): r for r in first}
    return out, failed, asked


def check_common(out: dict[str, ExtensionResult], failed: ExtensionResult,
                 asked: list[ChatRequest]) -> None:
    """What both SDKs' sentiment plugins answer alike."""
    stats, sentiment, brief = out["stats"], out["sentiment"], out["statsbrief"]
    assert stats.output_target == "silent" and stats.content_type == "application/json"
    assert sentiment.content == {"sentiment": "positive", "confidence": 0.9}
    assert sentiment.metadata["plugin"] == {"model": "house-model"}
    assert sentiment.output_target == "status_panel"
    assert sentiment.usage == {"input": 30, "output": 12}
    assert brief.content == {"words": 5}
    assert asked[0].response_format == {"type": "json_object"}
    assert len(asked) == 2  # #stats never asked the model
    assert not failed.success and "no JSON object" in (failed.error or "")


@pytest.mark.slow  # plugins/sentiment-py, a Python component built for it (and the example run)
def test_helpers_in_a_python_component(built: Built, crt: Runtime) -> None:
    out, failed, asked = run_sentiment(built, crt, "sentiment-py",
                                       "#stats #sentiment #stats:brief")
    check_common(out, failed, asked)
    assert out["stats"].content == {"words": 5, "sentences": 2, "earlier": []}
    assert out["stats"].metadata["plugin"] == {"helper": "wasmext_guest.helpers"}


@pytest.mark.slow  # a componentize-js build and a 12 MB component compiled: over a minute
def test_helpers_in_a_javascript_plugin(built: Built, crt: Runtime) -> None:
    out, failed, asked = run_sentiment(built, crt, "sentiment-js",
                                       "#stats #sentiment #stats:brief #stats:loud")
    check_common(out, failed, asked)
    assert out["stats"].content == {"words": 5, "sentences": 2, "preview": "Great…",
                                    "earlier": []}
    assert out["stats"].metadata["plugin"] == {"helper": "wasmext (javascript)"}
    loud = out["statsloud"]
    assert not loud.success and "not allowed" in (loud.error or "")  # allowed_params
