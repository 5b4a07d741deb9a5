"""[mcp] tables: MCP servers named in wasmext.toml or in a plugin's manifest.

    [mcp]
    connect_timeout_s = 10       # every server's default (the seeds' mcp.connectionTimeout)
    [mcp.servers.calc]
    transport = "stdio"          # stdio, sse or http (streamable HTTP; needs url)
    command = "python"
    args = ["calc_server.py"]
    env = { TOKEN = "${CALC_TOKEN}" }   # ${VAR}: missing ones warn and read as ""
                                 # (a plugin's manifest: only its allowed variables)
    inherit_env = true           # stdio: the host's environment under `env` (default);
                                 # false: the SDK's minimal one (PATH, HOME, ...). A
                                 # plugin's own servers never inherit (docs/mcp.md)
    headers = { Authorization = "Bearer ${CALC_TOKEN}" }   # sse/http: sent with each request
    roots = ["file:///srv/data"]  # answered to roots/list (default: none offered)
    sampling = false             # answer sampling/createMessage with the host's model
    oauth = { scopes = ["tools"] }   # sse/http: OAuth for the bearer token (see oauth_config)
    connect_timeout_s = 10
    call_timeout_s = 30
    enabled = true
    trust_tool_hints = false     # true: `mcp serve --include-mcp-tools` passes on its tools'
                                 # hints claiming safety (wasmext.toml only: a manifest's
                                 # server is vouched for by [plugin.ID] trust_tool_hints)

Validated as pydantic models (`McpSection`, `McpServer`): a bad table is one ConfigError
naming every problem with its field (`wasmext.validation`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, ValidationInfo, field_validator

from wasmext.errors import ConfigError
from wasmext.mcp.envsubst import substitute
from wasmext.text import clean
from wasmext.validation import SECTION, Seconds, check, context_path, problem

if TYPE_CHECKING:
    from wasmext.mcp.oauth.config import OAuthSettings

__all__ = ["McpSection", "McpServer", "McpServerConfig", "parse_mcp"]

log = logging.getLogger("wasmext.config")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")
# The table's key, handed to its server's model so that its validators can name it.
_NAME_KEY = "__server_name__"


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
    inherit_env: bool = True  # stdio: start from the host's environment (002's rule)
    # `mcp serve --include-mcp-tools` passes on hints claiming safety (mcp.server.hints);
    # only wasmext.toml may say so, never a plugin's manifest.
    trust_tool_hints: bool = False


def _server_name(name: str) -> str:
    if not (name and len(name) <= 64 and set(name) <= _NAME_CHARS):
        problem("a server name is 1-64 lowercase letters, digits and hyphens")
    return name


def _subst(value: str, info: ValidationInfo, fld: str) -> str:
    """`value` with its ${VAR}s from the environment the context names (default: the
    process's; a plugin's manifest: only its allowed variables); a missing one warns
    (unless the context is quiet) and reads as ""."""
    ctx = info.context if isinstance(info.context, Mapping) else {}
    environ = ctx.get("environ")
    out, missing = substitute(value, os.environ if environ is None else environ)
    name = clean(str(info.data.get("name", "?")), 64)
    for var in missing if not ctx.get("quiet") else ():
        log.warning("%s: field 'mcp.servers.%s.%s': ${%s} is not set; using an empty string",
                    context_path(info) or "config", name, fld, clean(var, 64))
    return out


class McpServer(BaseModel):
    """The rules of one [mcp.servers.NAME] table (fields are checked in this order)."""

    model_config = SECTION

    name: str = Field(alias="__server_name__")  # _NAME_KEY
    transport: Literal["stdio", "sse", "http"] = "stdio"
    command: str | None = Field(default=None, validate_default=True)
    url: str | None = Field(default=None, validate_default=True)
    args: list[str] = []
    env: dict[str, str] = {}
    headers: dict[str, str] = {}
    roots: list[str] = []
    sampling: bool = False
    enabled: bool = True
    inherit_env: bool = True
    connect_timeout_s: Seconds = 10.0
    call_timeout_s: Seconds = 30.0
    oauth: Any = None  # OAuthSettings once validated
    trust_tool_hints: bool = False

    @field_validator("trust_tool_hints")
    @classmethod
    def _vouch(cls, value: bool, info: ValidationInfo) -> bool:
        ctx = info.context if isinstance(info.context, Mapping) else {}
        if value and ctx.get("operator") is False:
            # A plugin vouching for its own server's hints would be no one vouching.
            problem("only the operator's wasmext.toml vouches for a server's tool hints")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None, info: ValidationInfo) -> str | None:
        value = None if value is None else _subst(value, info, "command")
        if info.data.get("transport") == "stdio" and not value:
            problem("a stdio server needs a command")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None, info: ValidationInfo) -> str | None:
        value = None if value is None else _subst(value, info, "url")
        transport = info.data.get("transport")
        if transport in ("sse", "http") and not value:
            problem(f"a {transport} server needs a url")
        return value

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return [_subst(a, info, f"args[{i}]") for i, a in enumerate(value)]

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        return {k: _subst(v, info, f"env.{k}") for k, v in value.items()}

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if value and info.data.get("transport") == "stdio":
            problem("only sse and http servers take headers")
        return {k: _subst(v, info, f"headers.{k}") for k, v in value.items()}

    @field_validator("roots")
    @classmethod
    def _roots(cls, value: list[str]) -> list[str]:
        if not all(r.startswith("file://") for r in value):
            problem("must be an array of file:// URIs")
        return value

    @field_validator("oauth")
    @classmethod
    def _oauth(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or "transport" not in info.data:
            return None
        from wasmext.mcp.oauth.config import parse_oauth  # its rules, one problem at a time

        fld = f"mcp.servers.{info.data.get('name', '?')}.oauth"
        try:
            return parse_oauth(value, context_path(info), fld, info.data["transport"],
                               lambda v, f: _subst(v, info, f.removeprefix(
                                   f"mcp.servers.{info.data.get('name', '?')}.")))
        except ConfigError as err:
            # "<file>: field '<fld>[.sub]': why": keep the sub-field and the why
            rest = err.message.partition(f"field '{fld}")[2]
            sub, _, why = rest.partition("': ")
            problem(why or err.message, sub.removeprefix(".") or None)

    def config(self, base_dir: Path | None, connect_timeout_s: float | None = None
               ) -> McpServerConfig:
        """The validated table as the client takes it; stdio servers run in `base_dir`;
        `connect_timeout_s`: the section's, for a table that gives none of its own."""
        connect = self.connect_timeout_s if connect_timeout_s is None \
            or "connect_timeout_s" in self.model_fields_set else connect_timeout_s
        return McpServerConfig(
            self.name, self.transport, self.command, tuple(self.args), self.env, self.url,
            float(connect), float(self.call_timeout_s), self.enabled,
            self.headers,
            str(base_dir) if base_dir is not None and self.transport == "stdio" else None,
            tuple(self.roots), self.sampling, self.oauth, self.inherit_env,
            self.trust_tool_hints)


class McpSection(BaseModel):
    """The rules of an [mcp] table: the global switch and the servers by name."""

    model_config = SECTION

    enabled: bool = True
    connect_timeout_s: Seconds | None = None  # every server's, unless it sets its own
    servers: dict[Annotated[str, AfterValidator(_server_name)], McpServer] = {}

    @field_validator("servers", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {k: {**s, _NAME_KEY: k} if isinstance(s, dict) else s for k, s in value.items()}

    def configs(self, base_dir: Path | None = None) -> tuple[McpServerConfig, ...]:
        """Every server, in the table's order; stdio servers run in `base_dir`."""
        return tuple(s.config(base_dir, self.connect_timeout_s)
                     for s in self.servers.values())


def parse_mcp(raw: Any, path: Path | None, base_dir: Path | None = None,
              environ: Mapping[str, str] | None = None, quiet: bool = False,
              operator: bool = False) -> tuple[bool, tuple[McpServerConfig, ...]]:
    """The [mcp] table; with `base_dir`, stdio servers run there (relative paths from it).
    `${VAR}` reads `environ` (default: the process environment); `quiet` logs no warning
    for a missing one. Unless `operator` says the table is the operator's own, a
    server's `trust_tool_hints = true` is refused (a plugin's manifest is read here)."""
    section = check(McpSection, raw, path, prefix="mcp",
                    context={"environ": environ, "quiet": quiet, "operator": operator})
    return section.enabled, section.configs(base_dir)
