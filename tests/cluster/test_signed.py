"""Signed replies (docs/cluster.md): on a server with no permissions at all, rogue
clients join the workers' queue group and answer every validator request `ok`,
unsigned or signed by a key nobody trusts. A caller that trusts the worker's key
counts none of their answers; one that trusts nothing is fooled (the attack is real)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_support import registry

from wasmext import Host, HostConfig, PipelineError, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.cluster.signed import ReplySigner, check_reply
from wasmext.errors import SignatureInvalid
from wasmext.lifecycle.signing import generate_key
from wasmext.runtime import Runtime

P = "signed"
GUARD = f"{P}.ext.validate.agent-guard.v0"


@pytest.fixture
def app() -> Iterator[Host]:
    with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        yield host


def _rogue(url: str, name: str, signer: ReplySigner | None) -> NatsLink:
    """A client answering every guard request `ok` (signed with `signer`, if any)."""
    link = NatsLink(url, name=name)

    async def answer(msg: Any) -> None:
        headers = {"Wasmext-Worker": "real", "Content-Type": "application/json"}
        body = b'{"status": "ok"}'
        if signer is not None:
            headers = signer.sign(msg.subject, (msg.headers or {}).get("Wasmext-Call-Id", ""),
                                  headers, body)
        await link.client.publish(msg.reply, body, headers=headers)

    link.run(link.client.subscribe(GUARD, queue="wasmext", cb=answer), 5)
    link.run(link.client.flush(), 5)
    return link


def _router(link: NatsLink, trusted: tuple[str, ...]) -> Router:
    reg = registry(P, agent_guard={"retry": 10, "breaker": {"failures": 1000}})
    return Router(parse_policy({"validators": [{"id": "agent-guard", "on_fail": "block"}]}),
                  RemoteCaller({"agent-guard": reg["agent-guard"]}, link,
                               trusted_workers=trusted))


def test_only_replies_signed_by_a_trusted_worker_count(spawn: Any, nats_url: str,
                                                       plugin_dir: Path, tmp_path: Path,
                                                       app: Host) -> None:
    public = generate_key(tmp_path / "worker.key")
    (tmp_path / "wasmext.toml").write_text('[nats]\nreply_key = "worker.key"\n')
    for name in ("real", "real2"):  # two workers, one rogue: a call meets 11 rogues rarely
        spawn(name, "worker", "--nats", nats_url, "--config", str(tmp_path / "wasmext.toml"),
              "--plugins", str(plugin_dir), "--name", name, "--prefix", P).wait_ready()
    generate_key(tmp_path / "rogue.key")
    with NatsLink(nats_url, name="caller") as link:
        for rogue_signer in (None, ReplySigner(tmp_path / "rogue.key")):
            rogue = _rogue(nats_url, "rogue", rogue_signer)
            try:
                fooled = _router(link, ())
                passed = 0
                for _ in range(30):
                    with app.session() as s, contextlib.suppress(PipelineError):
                        passed += fooled.run(s, "my password").blocked is False
                assert passed >= 1  # without signatures, a rogue's "ok" gets through

                guarded = _router(link, (public,))
                for _ in range(30):  # so the rogue surely takes some
                    started = time.monotonic()
                    with app.session() as s, pytest.raises(PipelineError,
                                                           match="banned word"):
                        guarded.run(s, "my password")
                    assert time.monotonic() - started < 10
                with app.session() as s:  # a healthy call answers
                    assert guarded.run(s, "hello").blocked is False
            finally:
                rogue.close()
            assert guarded.caller is not None
            stats = guarded.caller.stats["agent-guard"]
            assert stats.unsigned >= 1 and set(stats.by_worker) <= {"real", "real2"}
            assert stats.ok == sum(stats.by_worker.values()) == 31 and stats.failed == 0


def test_a_signature_binds_the_call_the_subject_and_the_answer(tmp_path: Path) -> None:
    public = generate_key(tmp_path / "worker.key")
    signer = ReplySigner(tmp_path / "worker.key")
    headers = signer.sign(GUARD, "call-1", {"Content-Type": "application/json"}, b"ok")
    check_reply(GUARD, "call-1", headers, b"ok", (public,))
    for subject, call, body, trusted in ((GUARD, "call-2", b"ok", (public,)),  # replayed
                                         (GUARD + "x", "call-1", b"ok", (public,)),
                                         (GUARD, "call-1", b"changed", (public,)),
                                         (GUARD, "call-1", b"ok", ())):
        with pytest.raises(SignatureInvalid):
            check_reply(subject, call, headers, body, trusted)
    errored = signer.sign(GUARD, "call-1", {"Nats-Service-Error-Code": "500",
                                            "Nats-Service-Error": "failed"}, b"")
    with pytest.raises(SignatureInvalid, match="does not match"):
        check_reply(GUARD, "call-1", {**errored, "Nats-Service-Error": "forged"}, b"",
                    (public,))
