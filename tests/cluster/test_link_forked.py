"""A NATS link (and a Router over it) opened before a fork, used in the forked child
while the parent keeps using it: the child's requests travel on a connection of the
child's own (the parent's loop thread is not in the child, and its socket is shared),
every answer reaches the process and the request that asked; a link opened on the
parent's event loop is refused in the child at once, with what to do."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import pytest
from test_fast_paths import POLICY, SUBJECT, InThread, serving  # noqa: F401 (a fixture)

from support import ParentAtWork, in_forked_child
from wasmext import Host
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.cluster.worker import Worker
from wasmext.errors import NatsLinkForked, NatsUnavailable

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
ROUNDS = 20


@pytest.fixture
def echo(nats_url: str) -> Any:
    """A subject answered with `echo:` and the request's body, by a link of the parent's."""
    subject = f"fork.echo.{uuid.uuid4().hex[:8]}"
    with NatsLink(nats_url, name="echo") as responder:
        async def answer(msg: Any) -> None:
            await responder.client.publish(msg.reply, b"echo:" + msg.data)

        responder.run(responder.client.subscribe(subject, cb=answer), 5)
        responder.run(responder.client.flush(), 5)
        yield subject


def _ask(link: NatsLink, subject: str, who: str, i: int) -> None:
    body = f"{who}-{i}".encode()
    got = link.request(subject, body, {}, 3).data
    assert got == b"echo:" + body, f"{who} asked {body!r} and got {got!r}"


def test_a_forked_child_requests_over_its_parents_link(nats_url: str, echo: str) -> None:
    # The link's loop thread is the parent's: the child's requests were queued for a
    # loop nobody ran, and each timed out as if no one answered.
    with NatsLink(nats_url, name="forking") as link:
        _ask(link, echo, "parent", -1)
        with ParentAtWork(lambda i: _ask(link, echo, "parent", i)) as parent:
            def child() -> float:
                started = time.monotonic()
                for i in range(ROUNDS):
                    _ask(link, echo, "child", i)
                link.close()  # the child's own connection; the parent's is untouched
                return time.monotonic() - started

            code, report = in_forked_child(child, within_s=30)
            time.sleep(0.2)  # the parent's requests go on after the child closed its link
        assert code == 0, report
        assert float(report) < 10
        assert not parent.failures and parent.rounds > 0, parent.failures
        _ask(link, echo, "parent", parent.rounds)


def test_a_forked_child_runs_a_router_opened_in_the_parent(nats_url: str,
                                                           serving: Host) -> None:  # noqa: F811
    worker = InThread(Worker(serving, nats_url, prefix="fast", name="forked-w"))
    registry = parse_registry({"stamp": {"type": "pre", "subject": SUBJECT,
                                         "timeout_ms": 3000}})
    try:
        with NatsLink(nats_url, name="router") as link, serving.session() as s:
            router = Router(POLICY, RemoteCaller(registry, link))
            expected = router.run(s, "hi").message["payload"]

            def child() -> str:
                started = time.monotonic()
                with serving.session() as mine:
                    got = [router.run(mine, f"hi {i}").message["payload"] for i in range(4)]
                    got.append(asyncio.run(router.arun(mine, "hi async")).message["payload"])
                assert time.monotonic() - started < 10
                return ",".join(got)

            code, report = in_forked_child(child, within_s=30)
            assert code == 0, report
            assert report == repr(",".join([expected] * 5))
            assert router.run(s, "again").message["payload"] == expected
    finally:
        worker.stop()


def test_a_link_opened_on_the_parents_loop_is_refused_in_the_child(nats_url: str,
                                                                   echo: str) -> None:
    # Forked from inside its loop, the child would run the parent's loop, whose
    # selector and socket the parent shares: refused at once, with what to do.
    async def main() -> tuple[int, str]:
        link = await NatsLink.open(nats_url, name="on-loop")
        try:
            assert (await link.arequest(echo, b"x", {}, 3)).data == b"echo:x"

            def child() -> str:
                started = time.monotonic()
                with pytest.raises(NatsLinkForked) as info:
                    link.request(echo, b"y", {}, 3)
                assert isinstance(info.value, NatsUnavailable)
                assert "fork" in str(info.value) and "open" in str(info.value)
                with pytest.raises(NatsLinkForked):
                    link.arequest(echo, b"y", {}, 3).close()
                assert time.monotonic() - started < 2
                return "refused"

            got = in_forked_child(child, within_s=20)
            assert (await link.arequest(echo, b"z", {}, 3)).data == b"echo:z"
            return got
        finally:
            await link.aclose()

    assert asyncio.run(main()) == (0, "'refused'")
