"""The `[http]` section of wasmext.toml: http.fetch's caps and the headers it injects.

    [http]
    max_response_bytes = 262144          # HttpLimits fields
    max_redirects = 5
    [[http.inject]]                      # a plugin's sensitive setting as a header
    plugin = "weather"
    host = "api.weather.example"         # fnmatch pattern of the hosts that get it
    header = "Authorization"
    setting = "weather_token"            # must be a sensitive setting of the plugin
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmext.mcp.config import need, table
from wasmext.services.http_fetch import HttpFetch, HttpLimits

__all__ = ["HttpSettings", "parse_http"]


@dataclass(frozen=True)
class HttpSettings:
    limits: HttpLimits = dataclasses.field(default_factory=HttpLimits)
    # (plugin id, host pattern, header, setting)
    inject: tuple[tuple[str, str, str, str], ...] = ()

    def service(self) -> HttpFetch:
        fetch = HttpFetch(self.limits)
        for plugin_id, host, header, setting in self.inject:
            fetch.inject_header(plugin_id, host, header, setting)
        return fetch


def parse_http(raw: Any, path: Path | None) -> HttpSettings:
    data = table(raw, path, "http")
    inject_raw = data.pop("inject", [])
    names = {f.name for f in dataclasses.fields(HttpLimits)}
    for key, value in data.items():
        need(key in names, path, f"http.{key}", f"unknown; one of {', '.join(sorted(names))}")
        need(type(value) is int and value >= 0, path, f"http.{key}", "must be an int >= 0")
    need(isinstance(inject_raw, list), path, "http.inject", "must be an array of tables")
    inject = []
    for n, item in enumerate(inject_raw):
        fld = f"http.inject[{n}]"
        item = table(item, path, fld)
        keys = ("plugin", "host", "header", "setting")
        need(set(item) == set(keys) and all(isinstance(item[k], str) and item[k]
                                            for k in keys), path, fld,
             "needs plugin, host, header and setting (non-empty strings)")
        inject.append((item["plugin"], item["host"], item["header"], item["setting"]))
    return HttpSettings(HttpLimits(**data), tuple(inject))
