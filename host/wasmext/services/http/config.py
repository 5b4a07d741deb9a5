"""The `[http]` section of wasmext.toml: http.fetch's caps and the headers it injects.

    [http]
    max_response_bytes = 262144          # HttpLimits fields
    max_redirects = 5
    dns_cache_ms = 5000                  # reuse a name's DNS answer (0: ask every time)
    [[http.inject]]                      # a plugin's sensitive setting as a header
    plugin = "weather"
    host = "api.weather.example"         # fnmatch pattern of the hosts that get it
    header = "Authorization"
    setting = "weather_token"            # must be a sensitive setting of the plugin
    scheme = "https"                     # the default; "http" only when written here
    port = 443                           # default: the scheme's (443, or 80 for http)

Validated as the pydantic model `HttpSection` (`wasmext.validation`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from wasmext.services.http.fetch import HttpLimits
from wasmext.services.http.settings import HttpSettings
from wasmext.validation import SECTION, Nonnegative, check

__all__ = ["HttpSection", "HttpSettings", "parse_http"]

_Text = Annotated[str, Field(strict=True, min_length=1)]


class Injection(BaseModel):
    """One [[http.inject]] entry: every field a non-empty string; the scheme https unless
    the operator writes http, the port the scheme's unless named."""

    model_config = SECTION

    plugin: _Text
    host: _Text
    header: _Text
    setting: _Text
    scheme: Literal["https", "http"] = "https"
    port: Annotated[int, Field(strict=True, gt=0, lt=65536)] | None = None

    def bound_port(self) -> int:
        """The port the header is sent to."""
        return self.port or (443 if self.scheme == "https" else 80)


class HttpSection(BaseModel):
    """The rules of the [http] section (the HttpLimits fields, each an int >= 0)."""

    model_config = SECTION

    max_request_bytes: Nonnegative | None = None
    max_response_bytes: Nonnegative | None = None
    max_headers: Nonnegative | None = None
    max_redirects: Nonnegative | None = None
    answer_margin_ms: Nonnegative | None = None
    dns_cache_ms: Nonnegative | None = None
    inject: list[Injection] = []

    def settings(self) -> HttpSettings:
        """The validated section as the service takes it."""
        given = {k: v for k in self.model_fields_set - {"inject"}
                 if (v := getattr(self, k)) is not None}
        return HttpSettings(HttpLimits(**given), tuple(
            (i.plugin, i.host, i.header, i.setting, i.scheme, i.bound_port())
            for i in self.inject))


def parse_http(raw: Any, path: Path | None) -> HttpSettings:
    """The [http] section, or one ConfigError naming every problem."""
    return check(HttpSection, raw, path, prefix="http").settings()
