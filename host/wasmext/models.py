"""Models for `wasmext run`: a transcript replayer (the embedded default) and
any OpenAI-compatible chat-completions endpoint (httpx, no SDK needed).

A model answers one step: {"response": str, "tool_calls": [{"call_id", "tool",
"args"}], "tokens": {"input": n, "output": n}}.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

from wasmext.errors import TranscriptError
from wasmext.files import read_regular
from wasmext.services.llm.client import ChatAnswer, ChatRequest, ModelError, OpenAIClient

__all__ = ["Model", "ModelError", "OpenAIModel", "ReplayModel", "Transcript", "load_transcript"]

MAX_TRANSCRIPT_BYTES = 16 * 2**20


class Model(Protocol):
    """A model an agent turn asks for the next response and tool calls."""

    name: str

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                 turn: int, step: int) -> dict[str, Any]:
        """The model's response, tool calls and token counts for this step of the turn."""
        ...


def _skip(text: str, i: int) -> int:
    """Past the JSON whitespace at `i`."""
    while text[i:i + 1] in (" ", "\t", "\n", "\r"):  # "" past the end: stops
        i += 1
    return i


def _offset_of(text: str, at: tuple[str | int, ...]) -> int | None:
    """Where the value at `at` (object keys and array indexes) starts in the JSON `text`,
    which json.loads accepted; None when it is not there. Only the objects and arrays on
    the way are walked: every other value is skipped by the C decoder."""
    decoder = json.JSONDecoder()
    i = _skip(text, 0)
    for part in at:
        if isinstance(part, str):
            if text[i:i + 1] != "{":
                return None
            i, found = _skip(text, i + 1), None
            while text[i:i + 1] == '"':
                key, i = decoder.raw_decode(text, i)
                i = _skip(text, _skip(text, i) + 1)  # past the ':'
                if key == part:
                    found = i  # the last of duplicate keys, as json.loads keeps it
                i = _skip(text, decoder.raw_decode(text, i)[1])
                if text[i:i + 1] == ",":
                    i = _skip(text, i + 1)
            if found is None:
                return None
            i = found
        else:
            if text[i:i + 1] != "[":
                return None
            i = _skip(text, i + 1)
            for _ in range(part):
                i = _skip(text, decoder.raw_decode(text, i)[1])
                if text[i:i + 1] != ",":
                    return None
                i = _skip(text, i + 1)
    return i


STEP_FIELDS = ("response", "tool_calls")
TOOL_CALL_FIELDS = ("tool", "args", "call_id")


def _no_unknown_field(refuse: Callable[[tuple[str | int, ...], str], NoReturn],
                      at: tuple[str | int, ...], entry: dict[str, Any],
                      fields: tuple[str, ...]) -> None:
    """Refuse the first key of `entry` that is not one of `fields`, naming those."""
    unknown = [key for key in entry if key not in fields]
    if unknown:
        known = ", ".join(repr(f) for f in fields)
        refuse(at, f"has an unknown field {str(unknown[0])[:64]!r} (it may have {known})")


class Transcript:
    """{"model": name, "system": str, "turns": [{"user": str, "steps": [step, ...]}]}

    A problem is a TranscriptError naming the file, the line (when the file's text is
    given) and the field: `transcript: demo.json:12: turns[1].steps[0] needs ...`."""

    def __init__(self, raw: dict[str, Any], path: Path | None = None,
                 text: str | None = None) -> None:
        def refuse(at: tuple[str | int, ...], what: str) -> NoReturn:
            try:
                offset = _offset_of(text, at) if text is not None else None
            except (ValueError, IndexError):  # a text that is not the one `raw` came from
                offset = None
            line = f":{text.count(chr(10), 0, offset) + 1}" if text and offset is not None \
                else ""
            field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at)
            where = f"{path}{line}: " if path is not None else ""
            raise TranscriptError(f"{where}{field.lstrip('.')} {what}")

        turns = raw.get("turns")
        if not isinstance(turns, list) or not turns:
            refuse(("turns",), "must be a non-empty array")
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict) or not isinstance(turn.get("user"), str) \
                    or not isinstance(turn.get("steps"), list) or not turn["steps"]:
                refuse(("turns", i), "needs 'user' (str) and 'steps' (a non-empty array)")
            for j, step in enumerate(turn["steps"]):
                if not isinstance(step, dict) or not isinstance(step.get("response", ""), str) \
                        or not isinstance(step.get("tool_calls", []), list):
                    refuse(("turns", i, "steps", j), "needs 'response' (str) and optional "
                           "'tool_calls' (array)")
                # Both fields are optional, so a misspelt one would play as an empty step.
                _no_unknown_field(refuse, ("turns", i, "steps", j), step, STEP_FIELDS)
                for k, call in enumerate(step.get("tool_calls", [])):
                    if not isinstance(call, dict) or not isinstance(call.get("tool"), str) \
                            or not isinstance(call.get("args", {}), dict):
                        refuse(("turns", i, "steps", j, "tool_calls", k),
                               "needs 'tool' (str) and optional 'args' (object)")
                    _no_unknown_field(refuse, ("turns", i, "steps", j, "tool_calls", k),
                                      call, TOOL_CALL_FIELDS)
        self.turns: list[dict[str, Any]] = turns
        self.system: str = str(raw.get("system", "You are a helpful assistant."))
        self.model: str = str(raw.get("model", "replay"))
        completions = raw.get("completions", [])
        if not isinstance(completions, list) or not all(isinstance(c, str) for c in completions):
            refuse(("completions",), "must be an array of strings")
        # What llm.complete answers under this transcript, in order (then again).
        self.completions: list[str] = completions


def load_transcript(path: Path) -> Transcript:
    """Read a JSON transcript file; TranscriptError (naming the file and line) if it is
    unreadable, not JSON, or not a transcript."""
    try:
        text = read_regular(path, MAX_TRANSCRIPT_BYTES).decode("utf-8")
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranscriptError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from exc
    except (OSError, ValueError, RecursionError) as exc:
        raise TranscriptError(f"{path}: cannot read it: {exc}") from exc
    if not isinstance(raw, dict):
        raise TranscriptError(f"{path}:1: a transcript is a JSON object")
    return Transcript(raw, path, text)


class ReplayModel:
    """Answers each step with the transcript's scripted step."""

    def __init__(self, transcript: Transcript) -> None:
        self.transcript = transcript
        self.name = transcript.model
        self._asked = 0
        self._lock = threading.Lock()

    def chat(self, req: ChatRequest) -> ChatAnswer:
        """llm.complete under replay: the transcript's next scripted completion (or, with
        none, the last message's first words); tokens are counted as words."""
        with self._lock:
            n, self._asked = self._asked, self._asked + 1
        scripted = self.transcript.completions
        text = scripted[n % len(scripted)] if scripted else \
            " ".join(str(req.messages[-1].get("content", "")).split()[:20])
        words = sum(len(str(m.get("content", "")).split()) for m in req.messages)
        return ChatAnswer(text, "stop", words, len(text.split()), self.name)

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                 turn: int, step: int) -> dict[str, Any]:
        """Replay the transcript's scripted step (the last one once past the end)."""
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
    """POST {base_url}/chat/completions; the key comes from $OPENAI_API_KEY if set.

    The HTTP client is `services.llm.client.OpenAIClient` (httpx), the same one
    `llm.complete` uses when the host's model is an endpoint.
    """

    def __init__(self, base_url: str, model: str, timeout_s: float = 60.0,
                 api_key_env: str = "OPENAI_API_KEY") -> None:
        self.client = OpenAIClient(base_url, os.environ.get(api_key_env))
        self.url = self.client.url
        self.name = model
        self.timeout_s = timeout_s

    def chat(self, req: ChatRequest) -> ChatAnswer:
        """One completion: what `llm.complete` calls when this is the host's model."""
        return self.client.chat(req)

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                 turn: int, step: int) -> dict[str, Any]:
        """Ask the OpenAI-compatible endpoint through the LLM client."""
        answer = self.client.chat(ChatRequest(messages, self.name, tools=tools,
                                              timeout_s=self.timeout_s))
        return {"response": answer.text, "tool_calls": answer.tool_calls,
                "tokens": {"input": answer.input_tokens, "output": answer.output_tokens}}
