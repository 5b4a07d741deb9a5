"""The [tracing] section's rules: the config model that validates it into TracingSettings.

Kept apart from observe.tracing so that code which only makes spans (the sandbox's
host calls, a plugin's own test) does not load the config models (pydantic).
"""

from __future__ import annotations

import logging
import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from wasmext.mcp.envsubst import substitute
from wasmext.observe.tracing import TracingSettings
from wasmext.text import clean
from wasmext.validation import SECTION, check

__all__ = ["TracingSection", "parse_tracing"]

log = logging.getLogger("wasmext.observe.tracing")

_Text = Annotated[str, Field(strict=True, min_length=1, max_length=2048)]


class TracingSection(BaseModel):
    """The rules of [tracing]; `${VAR}` in a header value reads the environment (a
    collector's token stays out of the file, and no plugin may read that variable)."""

    model_config = SECTION

    enabled: bool = False
    exporter: Literal["otlp-http", "otlp-grpc", "console"] = "otlp-http"
    endpoint: _Text | None = None
    service_name: Annotated[str, Field(strict=True, min_length=1, max_length=256)] = "wasmext"
    headers: dict[Annotated[str, Field(strict=True, min_length=1, max_length=256)], _Text] = {}
    sample_ratio: Annotated[float, Field(strict=True, ge=0, le=1)] = 1.0

    def settings(self) -> TracingSettings:
        """The validated section, its header values' `${VAR}`s read from the environment."""
        headers = {}
        for name, raw in self.headers.items():
            headers[name], missing = substitute(raw, os.environ)
            if missing:  # said once, at load: the collector will refuse what is sent
                log.warning("[tracing] header %s: environment variable %s is not set",
                            clean(name, 64), ", ".join(missing))
        return TracingSettings(self.enabled, self.exporter, self.endpoint, self.service_name,
                               headers, float(self.sample_ratio))


def parse_tracing(raw: Any) -> TracingSettings:
    """A [tracing] table, or one ConfigError naming every problem."""
    return check(TracingSection, raw, None, prefix="tracing").settings()
