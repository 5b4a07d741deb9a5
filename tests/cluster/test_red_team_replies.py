"""A hostile NATS peer against a link's reply subscription (`link._Replies`): a peer that
is sent one request sees its reply subject, and with it the link's reply prefix.

HOLE (fixed): a request's token was the link's next integer, so a worker that got
one request could answer the link's other requests, to other workers, ahead of them
(`<prefix>.0`, `<prefix>.1`, ...). A token is now unguessable: a peer can answer only
the request it was sent.
"""

from __future__ import annotations

import asyncio
import threading
import time

from wasmext.cluster.link import NatsLink


def _serve(link: NatsLink, subject: str, answer: object) -> None:
    async def start() -> None:
        await link.client.subscribe(subject, cb=answer)  # type: ignore[arg-type]
        await link.client.flush()
    link.run(start(), 5)


def test_a_peer_cannot_answer_requests_it_was_not_sent(nats_url: str) -> None:
    with NatsLink(nats_url, name="asker") as link, \
            NatsLink(nats_url, name="peers") as peers:
        async def honest(msg: object) -> None:
            await asyncio.sleep(0.5)  # slower than the forger
            await peers.client.publish(msg.reply, b"honest")  # type: ignore[attr-defined]

        seen: list[str] = []

        async def forger(msg: object) -> None:
            reply: str = msg.reply  # type: ignore[attr-defined]
            seen.append(reply)
            prefix, _, token = reply.rpartition(".")
            guesses = {str(k) for k in range(400)} | {
                token[:-1] + c for c in "0123456789abcdefABCDEF"}
            for guess in guesses:
                if guess != token:  # a flood of answers for requests it never got
                    await peers.client.publish(f"{prefix}.{guess}", b"forged",
                                               headers={"Status": "503"})
            await peers.client.publish(reply, b"own")
            await peers.client.flush()

        _serve(peers, "victim.honest", honest)
        _serve(peers, "victim.hostile", forger)
        answers: list[bytes] = []
        asking = threading.Thread(target=lambda: answers.append(
            link.request("victim.honest", b"q", {}, 10).data))
        started = time.monotonic()
        asking.start()
        time.sleep(0.1)  # the honest request is out (and has its token) first
        assert link.request("victim.hostile", b"q", {}, 10).data == b"own"
        asking.join(10)
        assert answers == [b"honest"]
        assert time.monotonic() - started < 5
        assert seen and link._replies.waiting == {}
        # The flood is dropped: the link answers as before.
        async def echo(msg: object) -> None:
            await peers.client.publish(msg.reply, msg.data)  # type: ignore[attr-defined]

        _serve(peers, "victim.echo", echo)
        assert link.request("victim.echo", b"after", {}, 5).data == b"after"


_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _nuid_successors(inbox: str) -> list[str]:
    """The inboxes nats-py could hand out after `inbox` (its NUID: a random prefix and a
    base-62 sequence that grows by a fixed step of 33 to 333)."""
    head, _, nuid = inbox.rpartition(".")
    pre, seq = nuid[:12], 0
    for c in nuid[12:]:
        seq = seq * 62 + _DIGITS.index(c)
    out = []
    for step in range(33, 3 * 334):  # a few inboxes made in between, too
        n, digits = seq + step, []
        for _ in range(10):
            digits.append(_DIGITS[n % 62])
            n //= 62
        out.append(f"{head}.{pre}{''.join(reversed(digits))}")
    return out


def test_a_peer_cannot_guess_another_calls_callback_inbox(nats_url: str) -> None:
    """HOLE (fixed): a remote middleware's `next` comes back on a callback inbox named in
    its call, and that inbox was nats-py's next NUID: a worker that served one call
    could reach the next call's inbox in a few hundred publishes and have that caller
    run its inner layers (model, tools) for a request it made up. The inbox now ends
    in 64 random bits."""
    import queue
    from types import SimpleNamespace

    from wasmext.cluster.plugins import RemotePlugin

    with NatsLink(nats_url, name="caller") as link, \
            NatsLink(nats_url, name="hostile-worker") as peer:
        proxy = SimpleNamespace(link=link)
        seen_q: queue.Queue[tuple[str, object]] = queue.Queue()
        victim_q: queue.Queue[tuple[str, object]] = queue.Queue()
        seen, seen_sub = link.run(RemotePlugin._callback_inbox(proxy, seen_q), 5)  # type: ignore[arg-type]
        victim, victim_sub = link.run(RemotePlugin._callback_inbox(proxy, victim_q), 5)  # type: ignore[arg-type]
        guesses = _nuid_successors(seen)
        started = time.monotonic()

        async def forge() -> None:
            for guess in guesses:
                await peer.client.publish(guess, b"forged next", reply="_INBOX.hostile")
            await peer.client.publish(seen, b"its own call's next", reply="_INBOX.hostile")
            await peer.client.flush()
        peer.run(forge(), 10)
        assert seen_q.get(timeout=5)[0] == "next"  # the inbox it was given still works
        time.sleep(0.2)
        assert victim not in guesses and victim_q.empty()
        assert time.monotonic() - started < 5
        link.run(seen_sub.unsubscribe(), 5)
        link.run(victim_sub.unsubscribe(), 5)
