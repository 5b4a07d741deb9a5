"""The `[llm]` section of wasmext.toml: the host's model, prices and per-plugin budgets.

    [llm]
    url = "http://127.0.0.1:8000/v1"    # an OpenAI-compatible endpoint
    model = "small-model"               # the host's model (default for every plugin)
    api_key_env = "OPENAI_API_KEY"      # sent as a bearer token when set
    [llm.prices.small-model]            # currency units per million tokens
    input = 0.15
    output = 0.60
    [llm.default]                       # LlmPolicy fields for every plugin
    max_tokens_per_call = 2048
    [llm.plugins.summarize]             # ... and for one plugin
    models = ["small-model", "big-model"]
    timeout_ms = 60000                  # llm_timeout_ms
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from wasmext.mcp.config import need, table
from wasmext.services.llm import Completer, LlmPolicy, LlmSettings, Price
from wasmext.services.llm_client import OpenAIClient

__all__ = ["completer_from", "parse_llm"]

_KEYS = {"url", "model", "api_key_env", "prices", "default", "plugins"}


def _policy(raw: Any, base: LlmPolicy, path: Path | None, fld: str) -> LlmPolicy:
    values = table(raw, path, fld)
    names = {f.name for f in dataclasses.fields(LlmPolicy)}
    for key, value in values.items():
        need(key in names, path, f"{fld}.{key}", f"unknown; one of {', '.join(sorted(names))}")
        if key == "models":
            need(isinstance(value, list) and all(isinstance(m, str) for m in value), path,
                 f"{fld}.models", "must be an array of model names")
            values[key] = tuple(value)
        else:
            need(type(value) is int and value > 0, path, f"{fld}.{key}",
                 "must be a positive int")
    return dataclasses.replace(base, **values)


def parse_llm(raw: Any, path: Path | None) -> LlmSettings:
    data = table(raw, path, "llm")
    unknown = sorted(set(data) - _KEYS)
    need(not unknown, path, f"llm.{unknown[0]}" if unknown else "llm", "unknown key")
    for key in ("url", "model", "api_key_env"):
        need(data.get(key) is None or isinstance(data[key], str), path, f"llm.{key}",
             "must be a string")
    prices = {}
    for model, price in table(data.get("prices", {}), path, "llm.prices").items():
        fld = f"llm.prices.{model}"
        price = table(price, path, fld)
        need(set(price) <= {"input", "output"} and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for v in price.values()), path, fld, "needs input and output: numbers >= 0")
        prices[model] = Price(float(price.get("input", 0)), float(price.get("output", 0)))
    default = _policy(data.get("default", {}), LlmPolicy(), path, "llm.default")
    plugins = {pid: _policy(p, default, path, f"llm.plugins.{pid}")
               for pid, p in table(data.get("plugins", {}), path, "llm.plugins").items()}
    return LlmSettings(url=data.get("url"), model=data.get("model"),
                       api_key_env=data.get("api_key_env") or "OPENAI_API_KEY",
                       prices=prices, default=default, plugins=plugins)


def completer_from(settings: LlmSettings) -> Completer | None:
    """The `[llm] url` endpoint as a Completer, or None without one."""
    if not settings.url:
        return None
    return OpenAIClient(settings.url, os.environ.get(settings.api_key_env)).chat
