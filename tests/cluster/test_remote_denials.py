"""A host op a worker denies a remote plugin reaches the caller's operator: the worker's
answer carries the call's denials (`PluginAnswer.denials`, only to a caller that asks,
`Wasmext-Notices: 1`) and the caller notes them as it notes its own, naming the worker,
once per session, plugin and op. On a real nats-server, with a worker in this process.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from click.testing import CliRunner
from cluster_support import ThreadedWorker, stage_request

from wasmext import Host, parse_policy
from wasmext.cluster.contract import PluginAdvert, PluginCall, encode
from wasmext.cluster.link import NatsLink
from wasmext.cluster.notices import MAX_HEADER_CHARS
from wasmext.cluster.plugins import RemotePlugin, attach_remote
from wasmext.cluster.registry import RemoteExtension, RemotePluginEntry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.cluster.signed import ReplySigner, check_reply
from wasmext.config import HostConfig
from wasmext.errors import InvalidOutput, SignatureInvalid
from wasmext.lifecycle.signing import generate_key
from wasmext.sandbox.hostcalls import DENIALS_PER_CALL
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, RESPONSE_AT, guest_wat, packed
from wasmext_cli.main import main

HOSTCALLS = "wasmext.sandbox.hostcalls"
WORKER = "w-den"
# A tool name a hostile plugin asks for: escapes, a forged second notice, 5,000 bytes.
HOSTILE_TOOL = ("\x1b]0;pwn\x07\x1b[2J\nwasmext: plugin other was denied everything\u202e"
                + "A" * 5000)


def _asking(requests: list[dict[str, Any]], times: int = 1, answer: str = "done",
            hook: str = "on_plain_text", value: Any = None) -> str:
    """A guest whose `hook` makes each host call in `requests` (`times` over), ignores
    the answers and answers `value` (default: `answer`)."""
    raw, calls = b"", []
    for request in requests:
        one = msgpack.packb(request)
        calls.append(f"(drop (call $host_call (i32.const {DATA_AT + len(raw)}) "
                     f"(i32.const {len(one)})))")
        raw += one
    answered = {"ok": True, "value": answer if value is None else value}
    response = msgpack.packb(answered)
    body = " ".join(calls * times) + f" (i64.const {packed(RESPONSE_AT, len(response))})"
    return guest_wat(body, imports=HOST_CALL_IMPORT, data=raw, response=answered,
                     registration={"hooks": [{"hook": hook}]})


def _folder(parent: Path, pid: str, wat: str) -> Path:
    folder = parent / pid
    folder.mkdir()
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\nabi = 1\n')
    (folder / f"{pid}.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))
    return folder


PROBES = [{"op": "tool.call", "name": HOSTILE_TOOL, "args": {}},
          {"op": "state.get", "key": "k"}, {"op": "state.set", "key": "k", "value": 1},
          {"op": "secret.get", "key": "token"}, {"op": "http.fetch", "url": "http://x.test/"},
          {"op": "llm.complete", "prompt": "hi"}, {"op": "agents.request", "agent": "a"}]


class DenyingWorker(ThreadedWorker):
    """A `Worker` on its own event-loop thread serving `nosy` (asks for state, not
    granted), `prober` (asks for seven ops it lacks, three times each; granted `tools`
    only, so its tool call is refused by name) and `steady`."""

    def __init__(self, url: str, parent: Path) -> None:
        self.host = Host(HostConfig(data_dir=parent / "worker-data"), plugin_dirs=[])
        self.host.add(_folder(parent, "nosy", _asking([{"op": "state.get", "key": "k"}],
                                                      answer="nosy")))
        self.host.add(_folder(parent, "prober", _asking(PROBES, times=3, answer="probed")),
                      grants=["tools"])
        self.host.add(_folder(parent, "nosy-guard", _asking(
            [{"op": "state.get", "key": "k"}], answer="ok", hook="validator",
            value={"status": "ok"})))
        self.host.add(_folder(parent, "steady", guest_wat(
            response={"ok": True, "value": "alive"},
            registration={"hooks": [{"hook": "on_plain_text"}]})))
        super().__init__(self.host, url, name=WORKER, concurrency=2)


@pytest.fixture(scope="module")
def worker(nats_url: str, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[DenyingWorker]:
    w = DenyingWorker(nats_url, tmp_path_factory.mktemp("denying-worker"))
    yield w
    w.close()


@pytest.fixture(scope="module")
def link(nats_url: str) -> Iterator[NatsLink]:
    with NatsLink(nats_url, name="remote-denials-test") as lk:
        yield lk


@pytest.fixture
def caller(tmp_path: Path) -> Iterator[Host]:
    """A host with no plugin of its own."""
    host = Host(HostConfig(data_dir=tmp_path / "caller"), plugin_dirs=[])
    yield host
    host.close()


def entry(pid: str, subject: str | None = None) -> RemotePluginEntry:
    return RemotePluginEntry(id=pid, subject=subject or f"wasmext.plugin.{pid}.v1",
                             timeout_ms=5000, attempt_ms=5000)


def attach(host: Host, link: NatsLink, *entries: RemotePluginEntry) -> list[RemotePlugin]:
    added = attach_remote(host, link, {e.id: e for e in entries})
    assert not host.load_errors, host.load_errors
    return added


def remote_notices(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The caller's notes of a worker's denials (the worker, in this process, logs its own
    on the same logger: those name no worker)."""
    return [r for r in caplog.records if r.name == HOSTCALLS and hasattr(r, "worker")]


def test_a_denial_on_the_worker_is_noted_on_the_caller_once_per_session(
        worker: DenyingWorker, link: NatsLink, caller: Host,
        caplog: pytest.LogCaptureFixture) -> None:
    attach(caller, link, entry("nosy"))
    with caplog.at_level(logging.WARNING, logger=HOSTCALLS):
        for session_id in ("s1", "s2"):
            with caller.session(session_id) as session:
                for _ in range(3):
                    assert session.on_plain_text("hi").value == "nosy"
        notes = remote_notices(caplog)
    assert [(r.plugin_id, r.op, r.worker, r.session, r.capability)  # type: ignore[attr-defined]
            for r in notes] == [("nosy", "state.get", WORKER, "s1", "state"),
                                ("nosy", "state.get", WORKER, "s2", "state")]
    text = notes[0].getMessage()
    assert text.startswith(f"plugin nosy was denied state.get on worker {WORKER} in session s1: ")
    assert "not granted 'state'" in text
    assert text.endswith("(later denials of state.get in this session are not reported)")


def test_wasmext_run_shows_the_workers_denial_with_its_grant(
        worker: DenyingWorker, nats_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`wasmext run` with `[remote.nosy]`: one `wasmext: ` line on stderr naming the plugin,
    the op and the worker, and how to grant it there."""
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
        '[remote.nosy]\nsubject = "wasmext.plugin.nosy.v1"\n')
    (tmp_path / "plugins").mkdir()
    (tmp_path / "t.json").write_text(json.dumps({"model": "m", "turns": [
        {"user": "hi", "steps": [{"response": "ok"}]},
        {"user": "again", "steps": [{"response": "ok"}]}]}))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "t.json", "--nats", nats_url])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if f"on worker {WORKER}" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"wasmext: plugin nosy was denied state.get on worker {WORKER}")
    assert lines[0].endswith("to allow it: wasmext grant nosy state on the worker's host")


def test_a_hostile_plugin_cannot_inflate_or_forge_notices(
        worker: DenyingWorker, link: NatsLink, caller: Host,
        caplog: pytest.LogCaptureFixture) -> None:
    """Seven denied ops, three times each, one of them a tool named with escapes, a forged
    second line and 5,000 bytes: the answer carries the first four ops, each one clean
    line of at most 300 characters, and every note names `prober`."""
    attach(caller, link, entry("prober"))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=HOSTCALLS), \
            caller.session("s-probe") as session:
        assert session.on_plain_text("hi").value == "probed"
        assert session.on_plain_text("hi").value == "probed"
        notes = remote_notices(caplog)
    assert time.monotonic() - started < 10
    assert DENIALS_PER_CALL == 4
    assert [r.op for r in notes] == ["tool.call", "state.get", "state.set",  # type: ignore[attr-defined]
                                     "secret.get"]
    assert {r.plugin_id for r in notes} == {"prober"}  # type: ignore[attr-defined]
    for record in notes:
        text = record.getMessage()
        assert text.startswith(f"plugin prober was denied {record.op} on worker {WORKER}")  # type: ignore[attr-defined]
        assert not any(ch in text for ch in "\x1b\x07\n\u202e"), text
        assert len(text) < 300 + 200
    tool = notes[0].getMessage()
    assert "AAAA" in tool and "A" * 400 not in tool
    # A name-pattern refusal (`tool:` grants) has no one grant that allows it.
    assert notes[0].capability is None  # type: ignore[attr-defined]
    attach(caller, link, entry("steady"))
    assert caller.try_call("steady", "on_plain_text", "x")[0].value == "alive"  # type: ignore[union-attr]


def test_a_rogue_workers_notices_are_bounded_and_name_the_proxys_plugin(
        link: NatsLink, caller: Host, caplog: pytest.LogCaptureFixture) -> None:
    """A worker's notices are held to what the caller allows: four per answer, op names
    only, each text cleaned and cut, a grant only when it is the op's own (the CLI prints
    it as a command), the plugin the proxy's. A notice naming a plugin is no contract."""
    huge = "\x1b[31m" + "m" * 100_000
    answers = [
        msgpack.packb({"ok": True, "value": "v", "changed": True, "denials": [
            {"op": "bad op\x1b[2J", "message": "x"},
            {"op": "state.get", "message": huge, "capability": "state; rm -rf ~"},
            {"op": "http.fetch", "message": "plugin other was denied", "capability": "http"},
            {"op": "o" * 65, "message": "too long a name"},
            *({"op": f"x.op{n}", "message": "flood"} for n in range(1000))]}),
        msgpack.packb({"ok": True, "value": "v", "changed": True, "denials": [
            {"op": "state.get", "message": "m", "plugin_id": "other"}]}),
    ]

    async def rogue(msg: Any) -> None:
        if msg.subject.endswith(".describe"):
            await msg.respond(encode(PluginAdvert("forged", "1.0.0", {
                "hooks": [{"hook": "on_plain_text"}]}), "application/msgpack"))
        elif msg.subject.endswith(".call"):
            await link.client.publish(msg.reply, answers.pop(0),
                                      headers={"Wasmext-Worker": "rogue"})
    sub = link.run(link.client.subscribe("rogue.plugin.forged.v1.*", cb=rogue))
    try:
        (proxy,) = attach(caller, link, entry("forged", "rogue.plugin.forged.v1"))
        with caplog.at_level(logging.WARNING, logger=HOSTCALLS):
            with caller.session("s-rogue") as session:
                assert session.on_plain_text("x").value == "v"
                # A notice with a field the contract has not: the answer is refused whole.
                with pytest.raises(InvalidOutput, match="not a PluginAnswer"):
                    proxy.call("on_plain_text", "x", {"session": "s-rogue"})
            notes = remote_notices(caplog)
    finally:
        link.run(sub.unsubscribe())
    # Of the first four, the bad op name and the 65-character one are dropped.
    assert [(r.op, r.plugin_id, r.worker, r.capability)  # type: ignore[attr-defined]
            for r in notes] == [("state.get", "forged", "rogue", None),
                                ("http.fetch", "forged", "rogue", "http")]
    assert all("\x1b" not in r.getMessage() and len(r.getMessage()) < 500 for r in notes)


def test_an_older_worker_and_an_older_caller_still_work(
        worker: DenyingWorker, link: NatsLink, caller: Host,
        caplog: pytest.LogCaptureFixture) -> None:
    """An older worker ignores `Wasmext-Notices` and answers without `denials`: the call
    answers, nothing is noted. An older caller sends no such header: the worker's answer
    has no `denials` key (its decoding refuses unknown keys), though the plugin was denied."""
    seen: list[dict[str, str]] = []

    async def older(msg: Any) -> None:
        if msg.subject.endswith(".describe"):
            await msg.respond(encode(PluginAdvert("older", "1.0.0", {
                "hooks": [{"hook": "on_plain_text"}]}), "application/msgpack"))
        elif msg.subject.endswith(".call"):
            seen.append(dict(msg.headers or {}))
            await msg.respond(msgpack.packb({"ok": True, "value": "from the past",
                                             "changed": True}))
    sub = link.run(link.client.subscribe("older.plugin.older.v1.*", cb=older))
    try:
        attach(caller, link, entry("older", "older.plugin.older.v1"))
        with caplog.at_level(logging.WARNING, logger=HOSTCALLS), caller.session() as session:
            assert session.on_plain_text("x").value == "from the past"
            assert remote_notices(caplog) == []
    finally:
        link.run(sub.unsubscribe())
    assert seen and seen[0].get("Wasmext-Notices") == "1"

    body = encode(PluginCall("on_plain_text", "x", "s-old", None), "application/msgpack")
    for headers, has_denials in (({}, False), ({"Wasmext-Notices": "1"}, True)):
        msg = link.request("wasmext.plugin.nosy.v1.call", body,
                           {"Content-Type": "application/msgpack", **headers}, 5)
        answer = msgpack.unpackb(msg.data)
        assert answer["value"] == "nosy" and ("denials" in answer) is has_denials, answer
    assert answer["denials"][0]["op"] == "state.get"


# -- pipeline stages: the notices in the answer's Wasmext-Denials header ------------------

GUARD_SUBJECT = "wasmext.ext.validate.nosy-guard.v1"


def _guarded(link: NatsLink, **caller: Any) -> Router:
    ext = RemoteExtension("nosy-guard", "validator", GUARD_SUBJECT, timeout_ms=5000)
    return Router(parse_policy({"validators": [{"id": "nosy-guard"}]}),
                  RemoteCaller({ext.id: ext}, link, **caller))


def test_a_remote_stages_denial_is_noted_on_the_callers_session(
        worker: DenyingWorker, link: NatsLink, caller: Host,
        caplog: pytest.LogCaptureFixture) -> None:
    """A validator served by the worker asks for state it was not granted: the run's
    session notes it once, under the extension's id, naming the worker; no grant command
    (the worker's plugin may have another id: its text names it)."""
    router = _guarded(link)
    with caplog.at_level(logging.WARNING, logger=HOSTCALLS):
        with caller.session("s-stage") as session:
            for _ in range(3):
                assert router.run(session, "hello").message["payload"] == "hello"
        notes = remote_notices(caplog)
    assert [(r.plugin_id, r.op, r.worker, r.session, r.capability)  # type: ignore[attr-defined]
            for r in notes] == [("nosy-guard", "state.get", WORKER, "s-stage", None)]
    assert "plugin nosy-guard was not granted 'state'" in notes[0].getMessage()


def test_a_stage_answer_carries_denials_only_when_asked(worker: DenyingWorker,
                                                        link: NatsLink) -> None:
    """An older caller (no Wasmext-Notices) gets the answer it always got, no header; a
    caller that asks gets the header, one line of JSON, bounded."""
    for asked in (False, True):
        msg = link.request(GUARD_SUBJECT, stage_request(f"m{asked}"),
                           {"Wasmext-Notices": "1"} if asked else {}, 5)
        assert json.loads(msg.data)["status"] == "ok"
        header = (msg.headers or {}).get("Wasmext-Denials")
        assert (header is not None) is asked, msg.headers
    assert header is not None and len(header) <= MAX_HEADER_CHARS
    assert json.loads(header)[0]["op"] == "state.get"


def test_a_signed_stage_answer_covers_its_denials(worker: DenyingWorker, link: NatsLink,
                                                  caller: Host, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A worker that signs covers the header: a caller trusting it notes the denial, and a
    header changed on the way breaks the signature."""
    public = generate_key(tmp_path / "w.key")
    worker.worker.signer = ReplySigner(tmp_path / "w.key")
    try:
        with caplog.at_level(logging.WARNING, logger=HOSTCALLS), \
                caller.session("s-signed") as session:
            _guarded(link, trusted_workers=(public,)).run(session, "hello")
            assert [r.op for r in remote_notices(caplog)] == ["state.get"]  # type: ignore[attr-defined]
        headers = {"Wasmext-Notices": "1", "Wasmext-Call-Id": "c1"}
        msg = link.request(GUARD_SUBJECT, stage_request("m-signed"), headers, 5)
    finally:
        worker.worker.signer = None
    answer = dict(msg.headers or {})
    check_reply(GUARD_SUBJECT, "c1", answer, msg.data, (public,))
    answer["Wasmext-Denials"] = answer["Wasmext-Denials"].replace("state.get", "state.set")
    with pytest.raises(SignatureInvalid):
        check_reply(GUARD_SUBJECT, "c1", answer, msg.data, (public,))


def test_a_rogue_stage_header_is_bounded(link: NatsLink, caller: Host,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """A worker's header is read only up to MAX_HEADER_CHARS, four notices, op names
    only, each text cleaned and cut; a header that is no JSON list is nothing."""
    flood = json.dumps([{"op": "bad op", "message": "x"},
                        {"op": "state.get", "message": "\x1b[2J" + "m" * 2000},
                        {"op": "http.fetch", "capability": "http", "message": "plugin other"},
                        "not a notice",
                        *({"op": f"x.n{n}", "message": "flood"} for n in range(10))])
    headers = [flood, json.dumps([{"op": "state.set", "message": "y" * MAX_HEADER_CHARS}]),
               "{not json", json.dumps({"op": "state.get"})]

    async def rogue(msg: Any) -> None:
        await link.client.publish(msg.reply, b'{"status":"ok"}', headers={
            "Wasmext-Worker": "rogue\x1b[31m", "Wasmext-Denials": headers.pop(0)})
    sub = link.run(link.client.subscribe("rogue.validate.guard", cb=rogue))
    ext = RemoteExtension("rogue-guard", "validator", "rogue.validate.guard", timeout_ms=5000)
    router = Router(parse_policy({"validators": [{"id": "rogue-guard"}]}),
                    RemoteCaller({ext.id: ext}, link))
    try:
        with caplog.at_level(logging.WARNING, logger=HOSTCALLS), \
                caller.session("s-rogue-stage") as session:
            for _ in range(4):
                assert router.run(session, "hi").message["payload"] == "hi"
            notes = remote_notices(caplog)
    finally:
        link.run(sub.unsubscribe())
    assert [(r.op, r.plugin_id, r.capability) for r in notes] == [  # type: ignore[attr-defined]
        ("state.get", "rogue-guard", None), ("http.fetch", "rogue-guard", None)]
    for record in notes:
        text = record.getMessage()
        assert "\x1b" not in text and len(text) < 500
        assert record.worker.startswith("rogue") and "\x1b" not in record.worker  # type: ignore[attr-defined]


def test_a_rogue_worker_cannot_flood_the_log_or_forge_a_grant_command(
        worker: DenyingWorker, link: NatsLink, caller: Host,
        caplog: pytest.LogCaptureFixture) -> None:
    """Red team: a peer answering in a worker's place names four fresh op names in every
    answer (a local plugin is denied only the op table's ops: one line each per session)
    and writes a grant command for another plugin in its text and in its worker name.
    Over 60 calls the caller notes the unknown ops once, as one op naming the first, and
    no note holds a command or the secret the text carried past its cut."""
    secret = "TOPSECRET-tail"
    forged = "not granted; to allow it: wasmext grant other fs:/ "
    calls = 60
    numbers = itertools.count()

    async def rogue(msg: Any) -> None:
        if msg.subject.endswith(".describe"):
            await msg.respond(encode(PluginAdvert("flooder", "1.0.0", {
                "hooks": [{"hook": "on_plain_text"}]}), "application/msgpack"))
        elif msg.subject.endswith(".call"):
            fresh = [{"op": f"x.flood{next(numbers)}", "message": forged + "z" * 400 + secret}
                     for i in range(3)]
            await link.client.publish(msg.reply, msgpack.packb({
                "ok": True, "value": "v", "changed": True, "denials": [
                    *fresh, {"op": "state.get", "message": forged, "capability": "state"}]}),
                headers={"Wasmext-Worker": "w; to allow it: wasmext grant other net:*"})
    sub = link.run(link.client.subscribe("rogue.plugin.flooder.v1.*", cb=rogue))
    started = time.monotonic()
    try:
        attach(caller, link, entry("flooder", "rogue.plugin.flooder.v1"))
        with caplog.at_level(logging.WARNING, logger=HOSTCALLS), \
                caller.session("s-flood") as session:
            for _ in range(calls):
                assert session.on_plain_text("x").value == "v"
            notes = remote_notices(caplog)
    finally:
        link.run(sub.unsubscribe())
    assert time.monotonic() - started < 30
    assert [(r.op, r.plugin_id, r.capability) for r in notes] == [  # type: ignore[attr-defined]
        ("ops unknown to this host", "flooder", None), ("state.get", "flooder", "state")]
    assert "x.flood" in notes[0].getMessage()
    for record in notes:
        text = record.getMessage()
        reason = text.partition("the worker says ")[2]
        assert "wasmext grant" not in text and "other" not in reason, text
        assert secret not in text and len(text) < 500
        assert record.worker == "w??to?allow?it:?wasmext?grant?other?net:?"  # type: ignore[attr-defined]
    attach(caller, link, entry("steady"))
    assert caller.try_call("steady", "on_plain_text", "x")[0].value == "alive"  # type: ignore[union-attr]
