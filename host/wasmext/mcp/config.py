"""[mcp] tables: MCP servers named in wasmext.toml or in a plugin's manifest.

    [mcp.servers.calc]
    transport = "stdio"          # stdio, sse or http (streamable HTTP; needs url)
    command = "python"
    args = ["calc_server.py"]
    env = { TOKEN = "${CALC_TOKEN}" }   # ${VAR}: missing ones warn and read as ""
    headers = { Authorization = "Bearer ${CALC_TOKEN}" }   # sse/http: sent with each request
    roots = ["file:///srv/data"]  # answered to roots/list (default: none offered)
    sampling = false             # answer sampling/createMessage with the host's model
    oauth = { scopes = ["tools"] }   # sse/http: OAuth for the bearer token (see oauth_config)
    connect_timeout_s = 10
    call_timeout_s = 30
    enabled = true
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.errors import ConfigError
from wasmext.mcp.envsubst import substitute

if TYPE_CHECKING:
    from wasmext.mcp.oauth.config import OAuthSettings


def need(cond: bool, path: Path | None, fld: str, why: str) -> None:
    """Raise ConfigError naming the file and field unless `cond` holds."""
    if not cond:
        raise ConfigError(f"{path or 'config'}: field '{fld}': {why}")


def table(raw: Any, path: Path | None, fld: str) -> dict[str, Any]:
    need(isinstance(raw, dict), path, fld, "must be a table")
    return dict(raw)

__all__ = ["McpServerConfig", "need", "parse_mcp", "table"]

log = logging.getLogger("wasmext.config")
_TRANSPORTS = ("stdio", "sse", "http")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server whose tools join the host's registry ([mcp.servers.NAME])."""

    name: str
    transport: str = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    connect_timeout_s: float = 10.0
    call_timeout_s: float = 30.0
    enabled: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None  # a stdio server's working folder (a manifest's: the plugin's)
    roots: tuple[str, ...] = ()
    sampling: bool = False
    oauth: OAuthSettings | None = None


def _subst(value: Any, path: Path | None, fld: str) -> str:
    need(isinstance(value, str), path, fld, "must be a string")
    out, missing = substitute(value, os.environ)
    for name in missing:
        log.warning("%s: field '%s': ${%s} is not set; using an empty string",
                    path or "config", fld, name)
    return out


def parse_mcp(raw: dict[str, Any], path: Path | None, base_dir: Path | None = None
              ) -> tuple[bool, tuple[McpServerConfig, ...]]:
    """The [mcp] table; with `base_dir`, stdio servers run there (relative paths from it)."""
    enabled = raw.pop("enabled", True)
    need(isinstance(enabled, bool), path, "mcp.enabled", "must be a bool")
    servers = table(raw.pop("servers", {}), path, "mcp.servers")
    need(not raw, path, f"mcp.{sorted(raw)[0] if raw else ''}", "unknown field")
    out = []
    for name, spec in servers.items():
        fld = f"mcp.servers.{name}"
        need(bool(name) and len(name) <= 64 and set(name) <= _NAME_CHARS, path, fld,
              "lowercase letters, digits and hyphens")
        spec = table(spec, path, fld)
        known = {f.name for f in dataclasses.fields(McpServerConfig)} - {"name", "cwd"}
        unknown = sorted(set(spec) - known)
        need(not unknown, path, f"{fld}.{unknown[0] if unknown else ''}", "unknown field")
        transport = spec.get("transport", "stdio")
        need(transport in _TRANSPORTS, path, f"{fld}.transport", f"one of {_TRANSPORTS}")
        command = _subst(spec["command"], path, f"{fld}.command") if "command" in spec else None
        url = _subst(spec["url"], path, f"{fld}.url") if "url" in spec else None
        need(transport != "stdio" or bool(command), path, f"{fld}.command",
              "a stdio server needs a command")
        need(transport == "stdio" or bool(url), path, f"{fld}.url",
              f"a {transport} server needs a url")
        args = spec.get("args", [])
        need(isinstance(args, list), path, f"{fld}.args", "must be an array of strings")
        env = table(spec.get("env", {}), path, f"{fld}.env")
        timeouts = {}
        for key in ("connect_timeout_s", "call_timeout_s"):
            value = spec.get(key, 10.0 if key == "connect_timeout_s" else 30.0)
            need(isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
                  path, f"{fld}.{key}", "must be a positive number of seconds")
            timeouts[key] = float(value)
        headers = table(spec.get("headers", {}), path, f"{fld}.headers")
        need(transport != "stdio" or not headers, path, f"{fld}.headers",
             "only sse and http servers take headers")
        roots = spec.get("roots", [])
        need(isinstance(roots, list) and all(isinstance(r, str) and r.startswith("file://")
                                             for r in roots), path, f"{fld}.roots",
             "must be an array of file:// URIs")
        sampling = spec.get("sampling", False)
        need(isinstance(sampling, bool), path, f"{fld}.sampling", "must be a bool")
        on = spec.get("enabled", True)
        need(isinstance(on, bool), path, f"{fld}.enabled", "must be a bool")
        oauth = None
        if "oauth" in spec:
            from wasmext.mcp.oauth.config import parse_oauth  # pydantic only when used
            oauth = parse_oauth(spec["oauth"], path, f"{fld}.oauth", transport,
                                lambda v, f: _subst(v, path, f))
        out.append(McpServerConfig(
            name, transport, command,
            tuple(_subst(a, path, f"{fld}.args[{i}]") for i, a in enumerate(args)),
            {k: _subst(v, path, f"{fld}.env.{k}") for k, v in env.items()}, url,
            timeouts["connect_timeout_s"], timeouts["call_timeout_s"], on,
            {k: _subst(v, path, f"{fld}.headers.{k}") for k, v in headers.items()},
            str(base_dir) if base_dir is not None and transport == "stdio" else None,
            tuple(roots), sampling, oauth))
    return enabled, tuple(out)
