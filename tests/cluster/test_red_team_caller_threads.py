"""A remote extension that answers well, with errors and with garbage, called from many
threads at once through one caller (red team against the caller's lock-free happy path).

The stats and the breaker skip their lock when nothing changes; from eight threads
every call is still counted exactly once (ok or failed), every answer's worker once,
a worker name off the wire stays cleaned, and a breaker that never reached its
threshold stays closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from wasmext.cluster.callids import CallIds
from wasmext.cluster.contract import JSON, ExtMessage, ExtResponse, encode
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller

THREADS, CALLS = 8, 40
GOOD = encode(ExtResponse(ExtMessage("m", "chat", "done"), {}), JSON)


@pytest.fixture
def links(nats_url: str) -> Iterator[tuple[NatsLink, NatsLink]]:
    """The caller's link and the responder's (a connection hears none of its own)."""
    with NatsLink(nats_url, name="red-threads") as caller, \
            NatsLink(nats_url, name="red-threads-server") as server:
        yield caller, server


def test_many_threads_count_every_call_once_on_the_lock_free_path(
        links: tuple[NatsLink, NatsLink]) -> None:
    link, server = links
    registry = parse_registry({"mixed": {"type": "pre", "subject": "redthreads.mixed",
                                         "timeout_ms": 5000, "retry": 0,
                                         "breaker": {"failures": 1000}}})
    seen = {"n": 0}

    async def respond(msg: Any) -> None:
        seen["n"] += 1
        n = seen["n"]
        if n % 5 == 0:  # an error answer
            await msg._client.publish(msg.reply, b"", headers={"Wasmext-Worker": "w\x1b[2Jbad",
                                            "Nats-Service-Error": "boom\r\nx: 1",
                                            "Nats-Service-Error-Code": "500"})
        elif n % 7 == 0:  # not the contract
            await msg._client.publish(msg.reply, b"\xff\x00garbage",
                                      headers={"Wasmext-Worker": "w2"})
        else:
            await msg._client.publish(msg.reply, GOOD, headers={"Wasmext-Worker": "w1"})

    async def serve() -> None:
        await server.client.subscribe("redthreads.mixed", cb=respond)
        await server.client.flush()
    server.run(serve(), 5)

    caller = RemoteCaller(registry, link)
    ext = registry["mixed"]
    outcomes: list[tuple[Any, str | None]] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(CALLS):
                outcome = caller.call(ext, {"message": {"payload": "x"}, "context": {}},
                                      CallIds("t", "default"))
                with lock:
                    outcomes.append(outcome)
        except BaseException as exc:
            failures.append(exc)

    started = time.monotonic()
    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures
    assert time.monotonic() - started < 60
    total = THREADS * CALLS
    assert len(outcomes) == total
    good = sum(1 for answer, error in outcomes if error is None and answer is not None)
    bad = [error for answer, error in outcomes if error is not None]
    stats = caller.stats["mixed"]
    assert (stats.calls, stats.ok, stats.failed) == (total, good, len(bad))
    assert stats.ok + stats.failed == stats.calls and stats.short_circuited == 0
    assert sum(stats.by_worker.values()) == total  # every answer's worker, once
    assert all("\x1b" not in name for name in stats.by_worker)
    assert all("\r" not in e and "\n" not in e and "\x1b" not in e for e in bad)
    assert bad and good  # both kinds were seen
    assert caller.breakers["mixed"].state == "closed"
