"""What `wasmext nats ls` shows: every service instance that answers `$SRV.INFO`
and `$SRV.STATS`, grouped by service name and version.

Answers come from the network, and any client that may publish to the inbox can
answer: what is shown is what peers *claim* (NATS permissions are what make the
claims trustworthy; docs/cluster.md). So each answer is decoded as JSON under the
contract's size cap, all answers together under `MAX_ANSWER_BYTES`; an instance
id counts once however often it answers (`duplicates` counts the repeats); each
answer contributes at most `MAX_ENDPOINTS` endpoints, a service lists at most
`MAX_SUBJECTS` subjects; a count is a non-negative int below 2**63 or nothing;
and an instance whose STATS and INFO disagree (no STATS, no INFO, another name,
version or set of endpoint subjects) is listed in `disagreeing`. Every string
shown is cleaned to one inert line.
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

__all__ = ["MAX_ANSWERS", "MAX_ANSWER_BYTES", "MAX_ENDPOINTS", "MAX_SUBJECTS",
           "ServiceSummary", "list_services"]

MAX_ANSWERS = 10_000  # answers kept per discovery subject
MAX_ANSWER_BYTES = 16 * 2**20  # their bytes together, per discovery subject
MAX_ENDPOINTS = 64  # endpoints read from one answer
MAX_SUBJECTS = 64  # subjects listed for one service
MAX_IDS = 256  # instance ids named in `as_dict`
_MAX_COUNT = 2**63 - 1  # NATS counts are uint64; past this a claim is not a count


@dataclass
class ServiceSummary:
    """One NATS micro service as discovery reports it: instances, subjects, counts."""

    name: str
    version: str
    instances: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    # Instances whose STATS and INFO disagree, each with why (peers' claims, cleaned).
    disagreeing: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0  # answers that repeated an instance id already heard
    unlisted: set[str] = field(default_factory=set)  # subjects past MAX_SUBJECTS

    def as_dict(self) -> dict[str, Any]:
        """The summary as a plain dict (instances counted, at most MAX_IDS named)."""
        return {"name": self.name, "version": self.version, "instances": len(self.instances),
                "instance_ids": self.instances[:MAX_IDS], "subjects": self.subjects,
                "subjects_not_listed": len(self.unlisted), "requests": self.requests,
                "errors": self.errors,
                "disagreeing": dict(list(self.disagreeing.items())[:MAX_IDS]),
                "duplicate_answers": self.duplicates}


async def _gather(nc: Client, subject: str, wait_s: float) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    taken = [0]  # bytes kept so far

    async def take(msg: Msg) -> None:
        size = len(msg.data)
        if size > MAX_BYTES or len(answers) >= MAX_ANSWERS or \
                taken[0] + size > MAX_ANSWER_BYTES:
            return
        try:
            doc = json.loads(msg.data)
        except (ValueError, RecursionError):
            return
        if isinstance(doc, dict):
            taken[0] += size
            answers.append(doc)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=take)
    await nc.publish(subject, b"", reply=inbox)
    await nc.flush()
    await asyncio.sleep(wait_s)  # every instance answers once; wait for the stragglers
    await sub.unsubscribe()
    return answers


def _endpoints(doc: dict[str, Any]) -> list[dict[str, Any]]:
    value = doc.get("endpoints")
    ends = value[:MAX_ENDPOINTS] if isinstance(value, list) else []
    return [e for e in ends if isinstance(e, dict)]


def _int(value: Any) -> int:
    return value if type(value) is int and 0 <= value <= _MAX_COUNT else 0


def _subjects(doc: dict[str, Any]) -> list[str]:
    return [clean(e.get("subject", "?"), 200) for e in _endpoints(doc)]


def _identity(doc: dict[str, Any]) -> tuple[str, str]:
    return clean(doc.get("name", "?"), 100), clean(doc.get("version", "?"), 40)


def _first_by_id(docs: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Each instance id's first answer, and how many more answers each id gave."""
    first: dict[str, dict[str, Any]] = {}
    repeats: dict[str, int] = {}
    for doc in docs:
        key = clean(doc.get("id", "?"), 64)
        if key in first:
            repeats[key] = repeats.get(key, 0) + 1
        else:
            first[key] = doc
    return first, repeats


def _disagreement(info: dict[str, Any] | None, stats: dict[str, Any] | None) -> str:
    """Why an instance's INFO and STATS do not describe one service; '' when they do."""
    if stats is None:
        return "no STATS answer"
    if info is None:
        return "no INFO answer"
    if _identity(info) != _identity(stats):
        return "STATS names another service or version"
    if sorted(set(_subjects(info))) != sorted(set(_subjects(stats))):
        return "STATS lists other endpoint subjects"
    return ""


async def list_services(nc: Client, wait_s: float = 0.5) -> list[ServiceSummary]:
    """Every NATS micro service that answers within wait_s, with its request counts."""
    info_docs, stats_docs = await asyncio.gather(_gather(nc, "$SRV.INFO", wait_s),
                                                 _gather(nc, "$SRV.STATS", wait_s))
    infos, info_repeats = _first_by_id(info_docs)
    stats, stats_repeats = _first_by_id(stats_docs)
    found: dict[tuple[str, str], ServiceSummary] = {}
    # Ids in the order they answered INFO, then those that answered STATS only.
    for iid in [*infos, *(i for i in stats if i not in infos)]:
        info, stat = infos.get(iid), stats.get(iid)
        described = info if info is not None else stat
        assert described is not None  # every id answered one of the two
        key = _identity(described)
        summary = found.get(key)
        if summary is None:
            summary = found[key] = ServiceSummary(*key)
        summary.instances.append(iid)
        for subject in _subjects(described):
            if subject in summary.subjects:
                continue
            if len(summary.subjects) < MAX_SUBJECTS:
                summary.subjects.append(subject)
            else:
                summary.unlisted.add(subject)
        # A repeated id is a claim about an instance already counted, nothing more.
        summary.duplicates += info_repeats.get(iid, 0) + stats_repeats.get(iid, 0)
        why = _disagreement(info, stat)
        if why:
            summary.disagreeing[iid] = why
        # A STATS naming another service than the INFO does counts for neither.
        if stat is not None and (info is None or _identity(info) == _identity(stat)):
            ends = _endpoints(stat)
            # A wasmext worker's own figures are in `data` (nats-py counts only what its
            # handler saw); any other service's are the standard fields.
            summary.requests += sum(_int(e.get("num_requests")) for e in ends)
            summary.errors += sum(_int(e["data"].get("errors"))
                                  if isinstance(e.get("data"), dict)
                                  else _int(e.get("num_errors")) for e in ends)
    return sorted(found.values(), key=lambda s: (s.name, s.version))
