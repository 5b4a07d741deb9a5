"""Models for `wasmext run`: a transcript replayer (the embedded default) and
any OpenAI-compatible chat-completions endpoint (stdlib HTTP, no SDK needed).

A model answers one step: {"response": str, "tool_calls": [{"call_id", "tool",
"args"}], "tokens": {"input": n, "output": n}}.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from wasmext.errors import ConfigError, WasmextError

__all__ = ["Model", "ModelError", "OpenAIModel", "ReplayModel", "Transcript", "load_transcript"]


class ModelError(WasmextError):
    reason = "model"


class Model(Protocol):
    name: str

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                 turn: int, step: int) -> dict[str, Any]: ...


class Transcript:
    """{"model": name, "system": str, "turns": [{"user": str, "steps": [step, ...]}]}"""

    def __init__(self, raw: dict[str, Any], path: Path | None = None) -> None:
        where = path or "transcript"
        turns = raw.get("turns")
        if not isinstance(turns, list) or not turns:
            raise ConfigError(f"{where}: 'turns' must be a non-empty array")
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict) or not isinstance(turn.get("user"), str) \
                    or not isinstance(turn.get("steps"), list) or not turn["steps"]:
                raise ConfigError(f"{where}: turns[{i}] needs 'user' (str) and 'steps' (array)")
            for j, step in enumerate(turn["steps"]):
                if not isinstance(step, dict) or not isinstance(step.get("response", ""), str) \
                        or not isinstance(step.get("tool_calls", []), list):
                    raise ConfigError(f"{where}: turns[{i}].steps[{j}] needs 'response' (str) "
                                      "and optional 'tool_calls' (array)")
        self.turns: list[dict[str, Any]] = turns
        self.system: str = str(raw.get("system", "You are a helpful assistant."))
        self.model: str = str(raw.get("model", "replay"))


def load_transcript(path: Path) -> Transcript:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read transcript: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a transcript is a JSON object")
    return Transcript(raw, path)


class ReplayModel:
    """Answers each step with the transcript's scripted step."""

    def __init__(self, transcript: Transcript) -> None:
        self.transcript = transcript
        self.name = transcript.model

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                 turn: int, step: int) -> dict[str, Any]:
        steps = self.transcript.turns[turn]["steps"]
        scripted = steps[min(step, len(steps) - 1)]
        calls = [{"call_id": c.get("call_id", f"call-{turn}-{step}-{k}"), "tool": c["tool"],
                  "args": c.get("args", {})}
                 for k, c in enumerate(scripted.get("tool_calls", []))]
        words = sum(len(str(m.get("content", "")).split()) for m in messages)
        response = scripted.get("response", "")
        return {"response": response, "tool_calls": calls,
                "tokens": {"input": words, "output": len(response.split())}}


class OpenAIModel:
    """POST {base_url}/chat/completions; the key comes from $OPENAI_API_KEY if set."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 60.0,
                 api_key_env: str = "OPENAI_API_KEY") -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.name = model
        self.timeout_s = timeout_s
        self.api_key = os.environ.get(api_key_env)

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                 turn: int, step: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.name, "messages": list(messages)}
        if tools:
            body["tools"] = [{"type": "function", "function": {
                "name": t["name"], "description": t.get("description", ""),
                "parameters": t.get("input_schema", {"type": "object"})}} for t in tools]
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, json.dumps(body).encode(), headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                doc = json.loads(resp.read())
            message = doc["choices"][0]["message"]
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
            raise ModelError(f"{self.url}: {exc}") from exc
        calls = []
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {"_raw": fn.get("arguments")}
            calls.append({"call_id": call.get("id", ""), "tool": fn.get("name", ""),
                          "args": args})
        usage = doc.get("usage", {})
        return {"response": message.get("content") or "", "tool_calls": calls,
                "tokens": {"input": usage.get("prompt_tokens", 0),
                           "output": usage.get("completion_tokens", 0)}}
