"""httpx request extensions that make a request end by one deadline.

httpx's timeouts are per phase (connect, each write, each read), so a request
with timeout T may take several times T. httpcore reads the timeout map before
each phase; the trace hook shrinks it to what is left of the deadline, so the
phases together end by it.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["until"]


def until(deadline: float) -> dict[str, Any]:
    """Extensions for `client.build_request` / `client.stream` ending by `deadline`
    (a time.monotonic() instant)."""
    left = max(0.001, deadline - time.monotonic())
    timeouts = {"connect": left, "read": left, "write": left, "pool": left}

    def retime(event: str, info: Any) -> None:
        if event.endswith(".started"):
            rest = max(0.001, deadline - time.monotonic())
            timeouts["read"] = timeouts["write"] = timeouts["connect"] = rest

    return {"timeout": timeouts, "trace": retime}
