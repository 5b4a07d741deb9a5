"""The `progress` op: a plugin reports progress of the call in hand (its `on_tool`).

The report goes to whoever bound a call scope around the call (`wasmext mcp
serve` binds one per `tools/call` and passes reports on as MCP progress
notifications when the client sent a progress token); outside a scope it is
dropped. Only increasing values go out, the message is one cleaned line, and
every report is a host call, so `max_host_calls` bounds how many there are.
"""

from __future__ import annotations

import math
from typing import Any

from wasmext.sandbox import callscope
from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.text import clean

__all__ = ["MAX_PROGRESS_MESSAGE", "install"]

MAX_PROGRESS_MESSAGE = 200


def _number(req: dict[str, Any], key: str, required: bool) -> float | None:
    value = req.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise OpError("invalid", f"'{key}' must be a finite number >= 0")
    return float(value)


def progress(ctx: CallContext, req: dict[str, Any]) -> dict[str, bool]:
    """Host call progress: pass a step to the call scope's client if it increases."""
    value = _number(req, "progress", True)
    assert value is not None
    total = _number(req, "total", False)
    message = req.get("message")
    if message is not None and not isinstance(message, str):
        raise OpError("invalid", "'message' must be a string")
    scope = callscope.current()
    if scope is None:
        return {"delivered": False}
    text = clean(message, MAX_PROGRESS_MESSAGE) if message is not None else None
    return {"delivered": scope.report(value, total, text)}


def install(services: HostServices) -> None:
    """Register the progress host call."""
    services.register("progress", progress)
