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
