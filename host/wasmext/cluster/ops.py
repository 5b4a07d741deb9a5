"""What `wasmext nats ls` shows: every service instance that answers `$SRV.INFO`
and `$SRV.STATS`, grouped by service name and version.

Answers come from the network: each is decoded as JSON under the contract's size
cap, and every string shown is cleaned to one inert line.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wasmext.cluster.contract import MAX_BYTES
from wasmext.text import clean

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

__all__ = ["ServiceSummary", "list_services"]


@dataclass
class ServiceSummary:
    """One NATS micro service as discovery reports it: instances, subjects, counts."""

    name: str
    version: str
    instances: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    requests: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The summary as a plain dict (instances counted)."""
        return {"name": self.name, "version": self.version, "instances": len(self.instances),
                "subjects": self.subjects, "requests": self.requests, "errors": self.errors}


async def _gather(nc: Client, subject: str, wait_s: float) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    inbox = nc.new_inbox()

    async def take(msg: Msg) -> None:
        if len(msg.data) <= MAX_BYTES and len(answers) < 10_000:
            try:
                doc = json.loads(msg.data)
            except (ValueError, RecursionError):
                return
            if isinstance(doc, dict):
                answers.append(doc)

    sub = await nc.subscribe(inbox, cb=take)
    await nc.publish(subject, b"", reply=inbox)
    await nc.flush()
    await asyncio.sleep(wait_s)  # every instance answers once; wait for the stragglers
    await sub.unsubscribe()
    return answers


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


async def list_services(nc: Client, wait_s: float = 0.5) -> list[ServiceSummary]:
    """Every NATS micro service that answers within wait_s, with its request counts."""
    infos, stats = await asyncio.gather(_gather(nc, "$SRV.INFO", wait_s),
                                        _gather(nc, "$SRV.STATS", wait_s))
    counts: dict[str, tuple[int, int]] = {}
    for doc in stats:
        endpoints = _list(doc.get("endpoints"))
        ends = [e for e in endpoints if isinstance(e, dict)]
        # A wasmext worker's own figures are in `data` (nats-py counts only what its
        # handler saw); any other service's are the standard fields.
        counts[str(doc.get("id"))] = (
            sum(_int(e.get("num_requests")) for e in ends),
            sum(_int(e["data"].get("errors")) if isinstance(e.get("data"), dict)
                else _int(e.get("num_errors")) for e in ends))
    found: dict[tuple[str, str], ServiceSummary] = {}
    for doc in infos:
        key = (clean(doc.get("name", "?"), 100), clean(doc.get("version", "?"), 40))
        summary = found.setdefault(key, ServiceSummary(*key))
        summary.instances.append(clean(doc.get("id", "?"), 64))
        endpoints = _list(doc.get("endpoints"))
        for e in endpoints:
            subject = clean(e.get("subject", "?"), 200) if isinstance(e, dict) else "?"
            if subject not in summary.subjects:
                summary.subjects.append(subject)
        requests, errors = counts.get(str(doc.get("id")), (0, 0))
        summary.requests += requests
        summary.errors += errors
    return sorted(found.values(), key=lambda s: (s.name, s.version))
