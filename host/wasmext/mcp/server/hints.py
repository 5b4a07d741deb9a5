"""Which tool annotations `wasmext mcp serve` passes on, and for whom.

MCP clients trust the server they connect to, and decide from a tool's hints
what to run without asking (a `readOnlyHint: true` tool is often auto-approved).
The spec says hints from an untrusted server must not be relied on; wasmext is
the trusted server here, but the hints it relays are what plugins (and the MCP
servers behind them) say about themselves. So a hint that makes a tool look
safer than the spec's default (`readOnlyHint` true, `destructiveHint` false,
`idempotentHint` true, `openWorldHint` false) is withheld unless the operator
vouched for the tool's owner:

    [plugin.notes]
    trust_tool_hints = true      # its tools, and its own MCP servers' tools
    [mcp.servers.calc]
    trust_tool_hints = true      # a configured server's tools (never from a manifest)

A hint equal to the spec's default (the more cautious reading) always passes,
and the host's own tools (the application's and the management tools) keep theirs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import mcp_types as types

if TYPE_CHECKING:
    from wasmext.host import Host
    from wasmext.services.tools import Tool

__all__ = ["SPEC_DEFAULTS", "HintTrust", "served_hints", "tool_annotations"]

# A logger of its own: `wasmext mcp serve` shows its INFO lines (the operator acts on
# them), not every INFO line of wasmext.mcp.
log = logging.getLogger("wasmext.mcp.hints")

# What a client assumes of a tool that gives no hint: it may change, destroy, repeat
# with effect and reach the world. A value other than these claims more safety.
SPEC_DEFAULTS: Mapping[str, bool] = {"readOnlyHint": False, "destructiveHint": True,
                                     "idempotentHint": False, "openWorldHint": True}
_HOST_OWNERS = frozenset({"host", "host:manage"})


def served_hints(hints: Mapping[str, bool] | None, trusted: bool
                 ) -> tuple[dict[str, bool], tuple[str, ...]]:
    """The hints to serve and the names of those withheld: all of them when `trusted`,
    else only those no safer than the spec's default."""
    given = dict(hints or {})
    if trusted:
        return given, ()
    kept = {k: v for k, v in given.items() if SPEC_DEFAULTS.get(k) == v}
    return kept, tuple(sorted(k for k in given if k not in kept))


def tool_annotations(hints: Mapping[str, bool]) -> types.ToolAnnotations | None:
    """The hints as the MCP type, or None when there are none."""
    if not hints:
        return None
    return types.ToolAnnotations(read_only_hint=hints.get("readOnlyHint"),
                                 destructive_hint=hints.get("destructiveHint"),
                                 idempotent_hint=hints.get("idempotentHint"),
                                 open_world_hint=hints.get("openWorldHint"))


class HintTrust:
    """Whether the operator vouched for a tool owner's hints, from the host's config."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._noted: set[tuple[str, tuple[str, ...]]] = set()  # (owner, its tools)

    def _vouching(self, owner: str) -> tuple[str, str] | None:
        """("plugin" | "mcp", name) of the config table that may vouch for `owner`."""
        kind, _, name = owner.partition(":")
        if kind == "mcp" and not any(s.name == name for s in self.host.config.mcp_servers):
            # A plugin's own server speaks for the plugin: the operator's word about
            # that plugin covers it, and nothing else does.
            plugin = self.host.mcp_server_owner(name)
            return ("plugin", plugin) if plugin is not None else None
        return (kind, name) if kind in ("plugin", "mcp") else None

    def _how_to_vouch(self, owner: str) -> str:
        table = self._vouching(owner)
        if table is None:
            return "nothing can vouch for them"
        kind, name = table
        section = "plugin" if kind == "plugin" else "mcp.servers"
        return f"[{section}.{name}] trust_tool_hints = true vouches for them"

    def trusted(self, owner: str) -> bool:
        """Does `owner` ("plugin:<id>", "mcp:<server>", "host") have its hints served?"""
        if owner in _HOST_OWNERS:
            return True
        table = self._vouching(owner)
        if table is None:
            return False  # an owner nobody can vouch for is nobody the operator vouched for
        kind, name = table
        config = self.host.config
        if kind == "plugin":
            over = config.overrides.get(name)
            return over is not None and over.trust_tool_hints
        return any(s.name == name and s.trust_tool_hints for s in config.mcp_servers)

    def annotations(self, tools: Iterable[Tool]) -> dict[str, types.ToolAnnotations | None]:
        """Each tool's annotations as served, by name. An owner whose hints were withheld
        is logged once (until its set of such tools changes), naming how to vouch."""
        trust: dict[str, bool] = {}
        out: dict[str, types.ToolAnnotations | None] = {}
        withheld_by: dict[str, list[str]] = {}
        for tool in tools:
            if tool.owner not in trust:
                trust[tool.owner] = self.trusted(tool.owner)
            hints, withheld = served_hints(tool.annotations, trust[tool.owner])
            out[tool.name] = tool_annotations(hints)
            if withheld:
                withheld_by.setdefault(tool.owner, []).append(tool.name)
        now = {(owner, tuple(names)) for owner, names in withheld_by.items()}
        for owner, names in sorted(now - self._noted):
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more"
                                             if len(names) > 5 else "")
            log.info("%s: hints claiming a tool is safer than the MCP defaults are not "
                     "served (%s); %s", owner, shown, self._how_to_vouch(owner))
        self._noted = now  # only what is served now: nothing piles up
        return out
