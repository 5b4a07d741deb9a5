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

Validated as the pydantic model `LlmSection` (`wasmext.validation`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field

from wasmext.services.llm.client import OpenAIClient
from wasmext.services.llm.service import Completer, LlmPolicy, LlmSettings, Price
from wasmext.validation import SECTION, Count, check

__all__ = ["LlmSection", "completer_from", "parse_llm"]

_Money = Annotated[float, Field(strict=True, ge=0)]


class PolicyTable(BaseModel):
    """LlmPolicy fields: what one table ([llm.default], [llm.plugins.ID]) changes."""

    model_config = SECTION

    models: list[str] | None = None
    max_tokens_per_call: Count | None = None
    max_tokens_per_session: Count | None = None
    max_tokens_per_day: Count | None = None
    max_in_flight: Count | None = None
    timeout_ms: Count | None = None

    def over(self, base: LlmPolicy) -> LlmPolicy:
        """`base` with the fields this table gives."""
        given: dict[str, Any] = {k: v for k in self.model_fields_set
                                 if (v := getattr(self, k)) is not None}
        if "models" in given:
            given["models"] = tuple(given["models"])
        return dataclasses.replace(base, **given)


class PriceTable(BaseModel):
    """Currency units per million tokens of one model."""

    model_config = SECTION

    input: _Money = 0.0
    output: _Money = 0.0


class LlmSection(BaseModel):
    """The rules of the [llm] section."""

    model_config = SECTION

    url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    prices: dict[str, PriceTable] = {}
    default: PolicyTable = PolicyTable()
    plugins: dict[str, PolicyTable] = {}

    def settings(self) -> LlmSettings:
        """The validated section; a plugin's table changes the default policy."""
        default = self.default.over(LlmPolicy())
        return LlmSettings(
            url=self.url, model=self.model, api_key_env=self.api_key_env or "OPENAI_API_KEY",
            prices={m: Price(float(p.input), float(p.output)) for m, p in self.prices.items()},
            default=default, plugins={pid: p.over(default) for pid, p in self.plugins.items()})


def parse_llm(raw: Any, path: Path | None) -> LlmSettings:
    """The [llm] section, or one ConfigError naming every problem."""
    return check(LlmSection, raw, path, prefix="llm").settings()


def completer_from(settings: LlmSettings) -> Completer | None:
    """The `[llm] url` endpoint as a Completer, or None without one."""
    if not settings.url:
        return None
    return OpenAIClient(settings.url, os.environ.get(settings.api_key_env)).chat
