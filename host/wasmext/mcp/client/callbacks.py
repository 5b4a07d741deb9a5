"""What wasmext answers when an MCP server asks its client something.

- `roots/list`: the server's configured `roots` (file:// URIs; none by default).
- `sampling/createMessage`: only for a server configured with `sampling = true`,
  and only when the application set `clients.sampler` (its model); otherwise the
  capability is not even offered, and a request gets a clean error.
- elicitation is never offered; a request gets the SDK's "not supported" error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import mcp_types as types

from wasmext.mcp.client.spec import ServerSpec
from wasmext.text import clean

__all__ = ["Sampling", "client_callbacks"]

log = logging.getLogger("wasmext.mcp")


class Sampling(Protocol):
    """Where the app's model is found when a server asks (`connections.McpClients`)."""

    sampler: Callable[[str, Any], Any] | None


def client_callbacks(clients: Sampling, spec: ServerSpec) -> dict[str, Any]:
    """Keyword arguments for the SDK's ClientSession for one server."""
    async def list_roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root.model_validate({"uri": uri})
                                            for uri in spec.roots])

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        sampler = clients.sampler
        if sampler is None:
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message="sampling is not available on this host")
        try:
            return await asyncio.to_thread(sampler, spec.name, params)
        except Exception as exc:  # the model's failure is the server's error answer
            log.warning("mcp server %s: sampling failed: %s", spec.name, exc)
            return types.ErrorData(code=types.INTERNAL_ERROR,
                                   message=clean(f"sampling failed: {exc}"))

    callbacks: dict[str, Any] = {"list_roots_callback": list_roots}
    if spec.sampling and clients.sampler is not None:
        callbacks["sampling_callback"] = sampling
    return callbacks
