"""The ids and budget every remote call of one pipeline run carries.

A leaf of the cluster package that needs neither msgspec nor nats-py, so routing a
policy in-process (`wasmext run` without the `nats` extra) imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CallIds"]


@dataclass(frozen=True)
class CallIds:
    """What every remote call of one pipeline run carries (body and headers): its ids and
    the budget of the call tree it belongs to (`deadline` in time.monotonic seconds and
    `calls_left` host calls; None: unbounded)."""

    trace_id: str
    tenant_id: str
    deadline: float | None = None
    calls_left: int | None = None
