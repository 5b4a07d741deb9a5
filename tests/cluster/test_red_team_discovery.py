"""`wasmext nats ls` against peers that lie in `$SRV.INFO` and `$SRV.STATS`.

Any client allowed to publish to the asker's inbox can answer discovery. A real
nats-server, one honest NATS micro service (what a wasmext worker is), and a hostile
Python responder claiming a wasmext service under one id fifty times, instances with
no STATS, STATS naming another service, counts that are not counts and thousands of
endpoints: each id counts once, counts are non-negative ints or nothing, fields are
bounded, disagreements are marked, and the honest service reads as before.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from cluster_support import nats_server

from wasmext.cluster.link import NatsLink
from wasmext.cluster.ops import MAX_SUBJECTS, list_services
from wasmext_cli.main import main

BOUND_S = 30.0  # discovery waits 0.5 s; this only catches a hang


@pytest.fixture(scope="module")
def nats_url() -> Iterator[str]:
    """A server of this module's own: discovery counts every instance on its server, and
    the session's shared workers (conftest), once started, serve `wasmext-stamp` too."""
    with nats_server() as (url, _):
        yield url
ESC = "\x1b]8;;http://evil\x07\x1b[2J\u202e\r\nFAKE"


def _info(iid: str, name: str = "wasmext-stamp", subjects: tuple[str, ...] = (
        "wasmext.ext.pre.stamp.v1",)) -> dict[str, Any]:
    return {"type": "io.nats.micro.v1.info_response", "id": iid, "name": name,
            "version": "1.2.0",
            "endpoints": [{"name": f"e{i}", "subject": s} for i, s in enumerate(subjects)]}


def _stats(iid: str, name: str = "wasmext-stamp", counts: Any = 1_000_000,
           subjects: tuple[str, ...] = ("wasmext.ext.pre.stamp.v1",)) -> dict[str, Any]:
    return {"type": "io.nats.micro.v1.stats_response", "id": iid, "name": name,
            "version": "1.2.0",
            "endpoints": [{"name": f"e{i}", "subject": s, "num_requests": counts,
                           "num_errors": counts} for i, s in enumerate(subjects)]}


# What the liar answers to each discovery request: every document, in order.
LIES = {
    "$SRV.INFO": [
        *[_info("dup")] * 50,  # one instance, answering fifty times
        *[_info(f"ghost-{n}") for n in range(3)],  # INFO only: no STATS behind them
        _info("turncoat"),  # its STATS names another service
        _info("wide", name="wasmext-wide",
              subjects=tuple(f"wasmext.wide.{n}" for n in range(5000))),
        _info("evil" + ESC, name="wasmext-evil" + ESC * 20, subjects=(ESC * 100,)),
    ],
    "$SRV.STATS": [
        *[_stats("dup")] * 50,
        _stats("turncoat", name="wasmext-other"),
        *[_stats(f"odd-{n}", name="wasmext-odd", counts=c)
          for n, c in enumerate([-5, 1.5, True, 2**70, "7", None, [3]])],
        _stats("wide", name="wasmext-wide",
               subjects=tuple(f"wasmext.wide.{n}" for n in range(5000))),
    ],
}


@pytest.fixture
def peers(nats_url: str) -> Iterator[NatsLink]:
    """The liar and an honest micro service, on a connection of their own."""
    from nats.micro import add_service
    from nats.micro.request import Request

    with NatsLink(nats_url, name="red-discovery-peers") as link:
        async def lie(msg: Any) -> None:
            for doc in LIES[msg.subject]:
                await link.client.publish(msg.reply, json.dumps(doc).encode())

        async def echo(req: Request) -> None:
            await req.respond(req.data)

        async def start() -> Any:
            subs = [await link.client.subscribe(s, cb=lie) for s in LIES]
            honest = await add_service(link.client, name="honest", version="0.3.0")
            await honest.add_endpoint(name="echo", subject="honest.echo", handler=echo)
            await link.client.request("honest.echo", b"hi", timeout=5)
            await link.client.flush()
            return subs, honest

        subs, honest = link.run(start(), 10)
        try:
            yield link
        finally:
            async def stop() -> None:
                for sub in subs:
                    await sub.unsubscribe()
                await honest.stop()
            link.run(stop(), 10)


def test_discovery_counts_each_instance_once_and_marks_what_disagrees(
        peers: NatsLink, nats_url: str) -> None:
    started = time.monotonic()
    with NatsLink(nats_url, name="red-discovery-asker") as asker:
        found = {s.name: s for s in asker.run(list_services(asker.client, 0.5), BOUND_S)}
    assert time.monotonic() - started < BOUND_S

    stamp = found["wasmext-stamp"]
    # "dup" once (49 + 49 repeats), three ghosts and the turncoat's INFO.
    assert sorted(stamp.instances) == ["dup", "ghost-0", "ghost-1", "ghost-2", "turncoat"]
    assert stamp.duplicates == 98
    assert stamp.requests == 1_000_000 and stamp.errors == 1_000_000  # dup's, counted once
    assert stamp.disagreeing == {
        "ghost-0": "no STATS answer", "ghost-1": "no STATS answer",
        "ghost-2": "no STATS answer", "turncoat": "STATS names another service or version"}
    assert "dup" not in stamp.disagreeing

    odd = found["wasmext-odd"]  # STATS only: listed, marked, and no count is believed
    assert len(odd.instances) == 7 and odd.requests == 0 and odd.errors == 0
    assert set(odd.disagreeing.values()) == {"no INFO answer"}

    wide = found["wasmext-wide"]
    assert len(wide.subjects) == MAX_SUBJECTS and wide.unlisted == set()  # 64 per answer
    assert not wide.disagreeing

    evil = next(s for n, s in found.items() if n.startswith("wasmext-evil"))
    for text in (evil.name, *evil.instances, *evil.subjects):
        assert "\x1b" not in text and "\n" not in text and "\u202e" not in text
    assert len(evil.name) <= 100 and all(len(s) <= 200 for s in evil.subjects)

    honest = found["honest"]  # the one service telling the truth reads as before
    assert len(honest.instances) == 1 and honest.version == "0.3.0"
    assert honest.subjects == ["honest.echo"] and honest.requests == 1
    assert not honest.disagreeing and honest.duplicates == 0


def test_nats_ls_shows_the_claims_marked_in_bounded_inert_lines(
        peers: NatsLink, nats_url: str) -> None:
    started = time.monotonic()
    table = CliRunner().invoke(main, ["nats", "ls", "--nats", nats_url])
    listed = CliRunner().invoke(main, ["nats", "ls", "--nats", nats_url, "--json"])
    assert time.monotonic() - started < 2 * BOUND_S
    assert table.exit_code == 0 and listed.exit_code == 0, table.output + listed.output
    for line in table.output.splitlines():
        assert len(line) < 8000 and "\x1b" not in line and "\u202e" not in line
    rows = {line.split()[0]: line for line in table.output.splitlines()
            if line.startswith(("wasmext-", "honest"))}
    assert rows["wasmext-stamp"].split()[2] == "5!"  # five instances, marked
    assert rows["honest"].split()[2] == "1"
    assert "! wasmext-stamp 1.2.0: 98 more answers repeated an instance id" in table.output
    assert "! wasmext-stamp 1.2.0: instance ghost-0: no STATS answer" in table.output
    doc = {s["name"]: s for s in json.loads(listed.output)}
    assert doc["wasmext-stamp"]["instances"] == 5
    assert doc["wasmext-stamp"]["duplicate_answers"] == 98
    assert doc["wasmext-stamp"]["disagreeing"]["turncoat"].startswith("STATS names")
    assert doc["honest"]["disagreeing"] == {} and doc["honest"]["instance_ids"]
