"""Which of the lists `wasmext mcp serve` offers changed, and telling its clients.

The served tools, resources (with templates) and prompts each have a
fingerprint; `check()` (run before every list, call, read or get and by the
server's poll) compares them with the last ones seen and sends
`notifications/{tools,resources,prompts}/list_changed` for exactly the lists
that differ. A burst of changes between two checks is one notification per
list; nothing changed is no notification. Handshake-era clients get it on
their connection (remembered at their first request, at most 1024);
2026-era clients on `subscriptions/listen`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
)

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession

__all__ = ["KINDS", "ListChanges", "fingerprint"]

log = logging.getLogger("wasmext.mcp")

KINDS = ("tools", "resources", "prompts")
MAX_CONNECTIONS = 1024
_EVENTS: dict[str, ServerEvent] = {"tools": ToolsListChanged(), "resources": ResourcesListChanged(),
           "prompts": PromptsListChanged()}
_SENDERS = {"tools": "send_tool_list_changed", "resources": "send_resource_list_changed",
            "prompts": "send_prompt_list_changed"}


def fingerprint(entries: Any) -> str:
    """A digest of anything JSON can render (sorted keys; other values by str)."""
    return hashlib.sha256(json.dumps(entries, sort_keys=True, default=str).encode()
                          ).hexdigest()


class ListChanges:
    """`fingerprints()` answers {kind: digest} for the lists served right now."""

    def __init__(self, fingerprints: Callable[[], dict[str, str]]) -> None:
        self.bus = InMemorySubscriptionBus()
        self._fingerprints = fingerprints
        self._seen = fingerprints()
        self._legacy: dict[int, ServerSession] = {}  # connections to notify (handshake era)
        self._lock = anyio.Lock()

    async def check(self) -> set[str]:
        """Notify clients of the lists that differ from the last look; which ones."""
        now = self._fingerprints()  # read and stored with no await between: one winner
        changed = {kind for kind in KINDS if now.get(kind) != self._seen.get(kind)}
        self._seen = now
        if changed:
            await self.broadcast(changed)
        return changed

    async def notify(self, kinds: set[str]) -> None:
        """Tell every client that `kinds` changed, whatever the fingerprints say."""
        self._seen = self._fingerprints()
        await self.broadcast(kinds)

    async def broadcast(self, kinds: set[str]) -> None:
        """Send list_changed for each kind to every client; drop clients that are gone."""
        async with self._lock:
            for kind in KINDS:
                if kind not in kinds:
                    continue
                await self.bus.publish(_EVENTS[kind])
                for key, session in list(self._legacy.items()):
                    try:
                        with anyio.fail_after(5):
                            await getattr(session, _SENDERS[kind])()
                    except Exception:  # a client that left: forget it
                        log.debug("%s/list_changed not delivered; dropping client", kind,
                                  exc_info=True)
                        self._legacy.pop(key, None)

    def remember(self, ctx: ServerRequestContext[Any]) -> None:
        """Keep a handshake-era connection to notify later."""
        if ctx.protocol_version in _modern_versions():
            return  # 2026-era clients hear of changes through subscriptions/listen
        connection = getattr(ctx.session, "_connection", None)
        key = id(connection if connection is not None else ctx.session)
        if key not in self._legacy and len(self._legacy) >= MAX_CONNECTIONS:
            self._legacy.pop(next(iter(self._legacy)))  # bounded: forget the oldest
        self._legacy.setdefault(key, ctx.session)


def _modern_versions() -> frozenset[str]:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return frozenset(MODERN_PROTOCOL_VERSIONS)
