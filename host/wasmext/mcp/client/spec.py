"""One configured MCP server, checked: the data every other client module shares."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wasmext.errors import ConfigError
from wasmext.mcp.config import McpServerConfig

__all__ = ["SERVER_ID_RE", "TRANSPORTS", "ServerSpec"]

TRANSPORTS = ("stdio", "sse", "http")
SERVER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class ServerSpec(McpServerConfig):
    """One MCP server (values already ${VAR}-substituted), checked on creation."""

    def __post_init__(self) -> None:
        for bad, why in [
                (not SERVER_ID_RE.match(self.name), "name: letters, digits, '_' and '-'"),
                (self.transport not in TRANSPORTS, f"transport must be one of {TRANSPORTS}"),
                (self.transport == "stdio" and not self.command, "stdio needs a command"),
                (self.transport != "stdio" and not self.url, f"{self.transport} needs a url"),
                (min(self.connect_timeout_s, self.call_timeout_s) <= 0, "timeouts must be > 0"),
                (self.transport == "stdio" and self.oauth is not None,
                 "oauth is only for sse and http servers")]:
            if bad:
                raise ConfigError(f"mcp server {self.name!r}: {why}")
        object.__setattr__(self, "args", tuple(self.args))

    @classmethod
    def from_config(cls, cfg: Any) -> ServerSpec:
        """From any object with the same fields (e.g. config.McpServerConfig)."""
        return cls(cfg.name, cfg.transport, cfg.command, tuple(cfg.args), dict(cfg.env),
                   cfg.url, float(cfg.connect_timeout_s), float(cfg.call_timeout_s),
                   bool(cfg.enabled), dict(getattr(cfg, "headers", {}) or {}),
                   getattr(cfg, "cwd", None), tuple(getattr(cfg, "roots", ())),
                   bool(getattr(cfg, "sampling", False)), getattr(cfg, "oauth", None),
                   bool(getattr(cfg, "inherit_env", True)))
