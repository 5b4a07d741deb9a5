"""The ids and budget every remote call of one pipeline run carries.

A leaf of the cluster package that needs neither msgspec nor nats-py, so routing a
policy in-process (`wasmext run` without the `nats` extra) imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

__all__ = ["CallIds"]


class CallIds(NamedTuple):
    """What every remote call of one pipeline run carries (body and headers): its ids and
    the budget of the call tree it belongs to (`deadline` in time.monotonic seconds and
    `calls_left` host calls; None: unbounded), and `note`, which notes the host ops a
    worker denied a stage ((extension id, worker, [(op, message, capability)]); None: the
    run asks for none). A named tuple: made once per run, where a frozen dataclass set
    each field through `object.__setattr__`."""

    trace_id: str
    tenant_id: str
    deadline: float | None = None
    calls_left: int | None = None
    note: Callable[[str, str, Iterable[tuple[str, str, str | None]]], None] | None = None
