"""Whole plugins served by a worker and called from a host as if local
(`wasmext.cluster.plugins`, `[remote.ID]`), on a real nats-server.

One worker runs in this process (its own event-loop thread) serving the example
plugins pii-mask and normalize-text (prebuilt, beside the CLI's example session) and
WAT plugins: `toolbox` (a tool), `spin` (spins until stopped: its own limits allow
30 s), `trap` (traps every call) and `steady` (answers "alive"). Each test's host has
no plugin of its own: only proxies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from cluster_support import ThreadedWorker

from support import ROOT
from wasmext import Host
from wasmext.cluster.contract import PluginAdvert, PluginCall, encode
from wasmext.cluster.link import NatsLink
from wasmext.cluster.plugins import MAX_ADVERT_BYTES, RemotePlugin, attach_remote, describe
from wasmext.cluster.registry import RemotePluginEntry
from wasmext.config import HostConfig, parse_config
from wasmext.errors import (
    Cancelled,
    HookAborted,
    RemoteRegistrationRefused,
    RemoteUnavailable,
    Timeout,
)
from wasmext.sandbox import calltree
from wasmext.sandbox.callscope import CallScope
from wasmext.testing import DATA_AT, RESPONSE_AT, guest_wat, packed

EXAMPLE = ROOT / "cli" / "wasmext_cli" / "example" / "plugins"
TOOL = {"name": "shout", "description": "Shouts\x1b[31m the text", "title": "Shout",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}},
                         "required": ["text"]}}
SPIN = "(loop $l (br $l)) (i64.const 0)"


def _wat_folder(parent: Path, pid: str, wat: str) -> None:
    folder = parent / pid
    folder.mkdir()
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\nabi = 1\n')
    (folder / f"{pid}.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("remote-plugins")
    for pid in ("pii-mask", "normalize-text", "turn-audit"):
        shutil.copytree(EXAMPLE / pid, parent / pid)
    _wat_folder(parent, "toolbox", guest_wat(
        response={"ok": True, "value": {"shouted": "HI"}},
        registration={"hooks": [{"hook": "on_tool"}], "tools": [TOOL]}))
    _wat_folder(parent, "spin", guest_wat(SPIN, registration={
        "hooks": [{"hook": "on_plain_text"}]}))
    _wat_folder(parent, "slowtool", guest_wat(SPIN, registration={
        "hooks": [{"hook": "on_tool"}],
        "tools": [{"name": "wait", "input_schema": {"type": "object"}}]}))
    ask = msgpack.packb({"op": "abi.info"})
    answer = msgpack.packb({"ok": True, "value": "asked"})
    _wat_folder(parent, "asker", guest_wat(
        f"(drop (call $hc (i32.const {DATA_AT}) (i32.const {len(ask)}))) "
        f"(i64.const {packed(RESPONSE_AT, len(answer))})",
        response={"ok": True, "value": "asked"}, data=ask,
        imports='(import "wasmext" "host_call" (func $hc (param i32 i32) (result i64)))',
        registration={"hooks": [{"hook": "on_plain_text"}]}))
    _wat_folder(parent, "trap", guest_wat("unreachable", registration={
        "hooks": [{"hook": "on_plain_text"}]}))
    _wat_folder(parent, "steady", guest_wat(response={"ok": True, "value": "alive"},
                                            registration={"hooks": [{"hook": "on_plain_text"}]}))
    return parent


def _worker_config(data: Path) -> HostConfig:
    cfg = parse_config({"plugin": {
        "spin": {"limits": {"timeout_ms": 30_000, "fuel_per_call": 10**15}},
        "slowtool": {"limits": {"timeout_ms": 30_000, "fuel_per_call": 10**15}},
        "normalize-text": {"settings": {"emoji": "strip"}}}})
    return dataclasses.replace(cfg, data_dir=data)


class InProcessWorker(ThreadedWorker):
    """A `Worker` serving `folder` on its own event-loop thread."""

    def __init__(self, url: str, folder: Path, data: Path, name: str, **options: Any) -> None:
        host = Host(_worker_config(data), plugin_dirs=[("workspace", folder)])
        assert not host.load_errors, host.load_errors
        super().__init__(host, url, name=name, concurrency=4, **options)

    def answered(self, pid: str) -> int:
        """Calls of `pid` this worker answered."""
        return sum(c.answered for subject, c in self.worker.counts.items()
                   if subject.startswith(f"wasmext.plugin.{pid}.") and subject.endswith(".call"))


@pytest.fixture(scope="module")
def worker(nats_url: str, served_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessWorker]:
    w = InProcessWorker(nats_url, served_dir, tmp_path_factory.mktemp("worker-data"), "w1")
    yield w
    w.close()


@pytest.fixture(scope="module")
def link(nats_url: str) -> Iterator[NatsLink]:
    with NatsLink(nats_url, name="remote-plugins-test") as lk:
        yield lk


def entry(pid: str, **over: Any) -> RemotePluginEntry:
    major = "0" if pid in ("pii-mask", "normalize-text", "turn-audit") else "1"
    return RemotePluginEntry(**{"id": pid, "subject": f"wasmext.plugin.{pid}.v{major}",
                                "timeout_ms": 5000, "attempt_ms": 5000, **over})


@pytest.fixture
def caller(tmp_path: Path) -> Iterator[Host]:
    """A host with no plugin of its own."""
    host = Host(HostConfig(data_dir=tmp_path / "caller"), plugin_dirs=[])
    yield host
    host.close()


def attach(host: Host, link: NatsLink, *entries: RemotePluginEntry) -> list[RemotePlugin]:
    return attach_remote(host, link, {e.id: e for e in entries})


def test_remote_hook_call_equals_local(worker: InProcessWorker, link: NatsLink,
                                       caller: Host, served_dir: Path, tmp_path: Path) -> None:
    added = attach(caller, link, entry("pii-mask"), entry("normalize-text"))
    assert [p.id for p in added] == ["pii-mask", "normalize-text"] and not caller.load_errors
    local = Host(_worker_config(tmp_path / "local"), plugin_dirs=[])
    for pid in ("pii-mask", "normalize-text"):
        local.add(served_dir / pid)
    texts = ["  Mail ann@example.com   or +1 (415) 555-0100 now 😀 ", "plain", ""]
    try:
        for text in texts:
            with caller.session() as remote_s, local.session() as local_s:
                remote, here = remote_s.on_plain_text(text), local_s.on_plain_text(text)
                assert remote.value == here.value
                assert [(e.plugin_id, e.outcome) for e in remote_s.trace.events] == \
                    [(e.plugin_id, e.outcome) for e in local_s.trace.events]
        # The same order: the advertised priorities are the plugins' own.
        assert [e.plugin_id for e in caller.ordered("on_plain_text")] == \
            [e.plugin_id for e in local.ordered("on_plain_text")] == ["pii-mask",
                                                                        "normalize-text"]
        assert added[0].by_worker == {"w1": len(texts)}
    finally:
        local.close()


def test_an_async_session_calls_remote_plugins_off_its_loop(worker: InProcessWorker,
                                                            link: NatsLink,
                                                            caller: Host) -> None:
    attach(caller, link, entry("pii-mask"), entry("normalize-text"))
    text = "  Mail ann@example.com   now 😀 "
    with caller.session() as s:
        expected = s.on_plain_text(text).value

    async def main() -> Any:
        async with caller.asession() as s:
            ticks = 0

            async def tick() -> None:  # the loop keeps turning while the calls wait
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0)
            ticker = asyncio.ensure_future(tick())
            results = await asyncio.gather(*[s.on_plain_text(text) for _ in range(8)])
            ticker.cancel()
            return [r.value for r in results], ticks
    values, ticks = asyncio.run(main())
    assert values == [expected] * 8 and expected == "Mail [EMAIL] now"
    assert ticks > 8


def test_remote_tool_equals_local_via_session_and_mcp(worker: InProcessWorker, link: NatsLink,
                                                      caller: Host, served_dir: Path,
                                                      tmp_path: Path) -> None:
    import anyio
    from mcp.client.client import Client

    from wasmext.mcp.server.serve import McpToolServer

    attach(caller, link, entry("toolbox"))
    local = Host(_worker_config(tmp_path / "local"), plugin_dirs=[])
    local.add(served_dir / "toolbox")
    try:
        # The catalog entry is the local one: the same name, schema, cleaned description.
        assert caller.tools.catalog() == local.tools.catalog()
        assert "\x1b" not in caller.tools.catalog()[0]["description"]
        with caller.session() as rs, local.session() as ls:
            remote = caller.tools.call("toolbox__shout", {"text": "hi"}, rs)
            here = local.tools.call("toolbox__shout", {"text": "hi"}, ls)
        assert remote == here == {"status": "ok", "output": {"shouted": "HI"}}
        # Arguments are checked against the advertised schema before any request goes out.
        before = worker.answered("toolbox")
        bad = caller.tools.call("toolbox__shout", {"text": 3})
        assert bad["status"] == "error" and bad["error"]["code"] == "invalid"
        assert worker.answered("toolbox") == before

        async def through_mcp(host: Host) -> Any:
            async with Client(McpToolServer(host, poll_interval=0).server,
                              read_timeout_seconds=30) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                result = await client.call_tool("toolbox__shout", {"text": "hi"})
                return names, result.is_error, result.structured_content, \
                    [c.model_dump() for c in result.content]
        assert anyio.run(through_mcp, caller) == anyio.run(through_mcp, local)
        assert anyio.run(through_mcp, caller)[1] is False
    finally:
        local.close()


def test_remote_middleware_runs_the_callers_inner_layers_once(
        worker: InProcessWorker, link: NatsLink, caller: Host, served_dir: Path,
        tmp_path: Path) -> None:
    """turn-audit's tool_call layer trims calc's expression, calls `next` (here: the
    caller's inner layers, from the worker) and marks the result audited."""
    attach(caller, link, entry("turn-audit"))
    local = Host(_worker_config(tmp_path / "local"), plugin_dirs=[])
    local.add(served_dir / "turn-audit")
    try:
        results = []
        for host in (caller, local):
            seen: list[Any] = []

            def core(data: dict[str, Any], seen: list[Any] = seen) -> dict[str, Any]:
                seen.append(data["args"])
                return {"status": "ok", "output": 42}
            with host.session() as s:
                out = s.middleware("tool_call", {
                    "turn_id": "t", "step": 0, "call_id": "c", "tool": "calc",
                    "args": {"expression": "  6*7  "}, "metadata": {}}, core)
                results.append((out, seen, [(e.plugin_id, e.outcome)
                                            for e in s.trace.events if e.plugin_id]))
        assert results[0] == results[1]
        assert results[0][0] == {"status": "ok", "output": 42, "audited": True}
        assert results[0][1] == [{"expression": "6*7"}]  # the inner layers ran once
    finally:
        local.close()


def test_a_remote_middlewares_next_runs_only_for_a_trusted_worker(
        nats_url: str, served_dir: Path, link: NatsLink, tmp_path: Path) -> None:
    """With signed replies, a `next` that a worker sends back is run only when signed by
    a trusted worker's key: another cannot make the caller run its inner layers."""
    from wasmext.cluster.natsauth import NatsAuth
    from wasmext.lifecycle.signing import generate_key

    public = generate_key(tmp_path / "worker.key")
    other = generate_key(tmp_path / "other.key")
    signed = InProcessWorker(nats_url, served_dir, tmp_path / "signed", "signed",
                             prefix="signed", auth=NatsAuth(reply_key=str(tmp_path / "worker.key")))
    try:
        where = entry("turn-audit", subject="signed.plugin.turn-audit.v0")
        advert = describe(link, where, (public,))
        for trusted, runs in (((public,), True), ((other,), False)):
            host = Host(HostConfig(data_dir=tmp_path / "h"), plugin_dirs=[])
            proxy = RemotePlugin(where, link, advert, trusted_workers=trusted,
                                 services=host.runtime.services)
            host.add(proxy, source_kind="remote")
            ran: list[Any] = []
            with host.session() as s:
                out = s.middleware("tool_call", {
                    "turn_id": "t", "step": 0, "call_id": "c", "tool": "calc",
                    "args": {"expression": " 1 "}, "metadata": {}},
                    lambda d, ran=ran: ran.append(d["args"]) or {"status": "ok", "output": 1})
            host.close()
            if runs:
                assert ran == [{"expression": "1"}] and out.get("audited") is True
            else:  # its next refused, its answer too: the layer is skipped (open policy)
                # and the inner layers ran once, from here, as they were
                assert ran == [{"expression": " 1 "}] and "audited" not in out
                assert proxy.faults == 1 and "not in trusted_workers" in str(
                    proxy.last_fault)
    finally:
        signed.close()


def test_deadline_carried_a_slow_plugin_stops_at_the_callers_deadline(
        worker: InProcessWorker, link: NatsLink, caller: Host) -> None:
    (spin,) = attach(caller, link, entry("spin", timeout_ms=500, attempt_ms=500),
                     entry("steady"))[:1]
    before = worker.answered("spin")
    started = time.monotonic()
    result, error = caller.try_call("spin", "on_plain_text", "x")
    took = time.monotonic() - started
    assert result is None and error is not None and error.startswith("timeout:")
    assert "on worker w1" in error  # the worker stopped the guest and said so
    assert took < 3.0  # its own limits allow 30 s
    assert worker.answered("spin") == before + 1
    assert spin.faults == 1  # the proxy's own deadline: the plugin's fault, as in-process
    # Inside a plugin call with 300 ms left, the tree's deadline goes along: the worker
    # stops there, and the time-out is the caller's, not counted against the plugin.
    calltree.push(calltree.Frame(time.monotonic() + 0.3, 1000, None))
    try:
        started = time.monotonic()
        with pytest.raises(Timeout) as info:
            spin.call("on_plain_text", "x")
        took = time.monotonic() - started
    finally:
        calltree.pop()
    assert info.value.inherited and took < 2.5
    assert spin.faults == 1
    # The worker is free again: a healthy plugin answers at once.
    assert caller.try_call("steady", "on_plain_text", "x")[0].value == "alive"  # type: ignore[union-attr]


def test_a_local_plugins_tool_call_carries_its_deadline_to_the_worker(
        worker: InProcessWorker, link: NatsLink, built: Any, tmp_path: Path) -> None:
    """relay-tools (local, 400 ms of its own) calls the remote tool slowtool__wait (30 s
    allowed on its worker) with tool.call: the worker stops the guest at the relay's
    deadline, the relay answers at once, and the time-out is not slowtool's fault."""
    from wasmext.testing import make_host

    with make_host((built["relay-tools"], {
            "grants": {"tools", "tool:slowtool__*"}, "limits": {"timeout_ms": 400},
            "settings": {"upstream": "slowtool__wait"}}),
            config=HostConfig(data_dir=tmp_path / "relay")) as host:
        (slow,) = attach(host, link, entry("slowtool", timeout_ms=20_000, attempt_ms=20_000))
        before = worker.answered("slowtool")
        started = time.monotonic()
        with host.session() as s:
            result = host.tools.call("relay-tools__ask", {"question": "hi"}, s)
        took = time.monotonic() - started
        assert result["status"] == "error" and result["error"]["code"] == "timeout", result
        assert "400 ms" in result["error"]["message"]
        assert took < 3.0
        deadline = time.monotonic() + 3.0  # the worker answered the abandoned call
        while worker.answered("slowtool") == before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert worker.answered("slowtool") == before + 1
        assert slow.faults == 0 and not slow.quarantined  # the relay's time, not its own


def test_the_callers_host_calls_left_go_along(worker: InProcessWorker, link: NatsLink,
                                              caller: Host) -> None:
    """`asker` makes one host call: inside a tree with none left, the worker refuses it
    (`host call limit`); with some left it answers."""
    from wasmext.errors import HostCallLimitExceeded

    (asker,) = attach(caller, link, entry("asker"))
    assert asker.call("on_plain_text", "x").value == "asked"  # no tree: its own budget
    for left, ok in ((0, False), (5, True)):
        calltree.push(calltree.Frame(time.monotonic() + 5.0, left, None))
        try:
            if ok:
                assert asker.call("on_plain_text", "x").value == "asked"
            else:
                with pytest.raises(HostCallLimitExceeded, match="on worker w1"):
                    asker.call("on_plain_text", "x")
        finally:
            calltree.pop()


def test_a_caller_that_gives_up_stops_the_workers_guest(worker: InProcessWorker,
                                                         link: NatsLink, caller: Host) -> None:
    (spin, _) = attach(caller, link, entry("spin", timeout_ms=30_000, attempt_ms=30_000),
                       entry("steady"))
    scope = CallScope()
    box: dict[str, Any] = {}
    before, cancels = worker.answered("spin"), worker.worker.cancelled

    def call() -> None:
        with scope.bound():
            try:
                spin.call("on_plain_text", "x")
            except Exception as exc:
                box["error"] = exc
    thread = threading.Thread(target=call)
    started = time.monotonic()
    thread.start()
    time.sleep(0.3)
    scope.cancel()
    thread.join(5)
    assert isinstance(box.get("error"), Cancelled)
    assert time.monotonic() - started < 3.0
    # The worker heard the cancel and its guest stopped (it answered the abandoned call),
    # long before the 30 s the plugin's limits allow.
    deadline = time.monotonic() + 3.0
    while worker.answered("spin") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert worker.answered("spin") == before + 1
    assert worker.worker.cancelled == cancels + 1
    assert spin.faults == 0  # a cancel is nobody's fault
    assert caller.try_call("steady", "on_plain_text", "x")[0].value == "alive"  # type: ignore[union-attr]


def test_an_mcp_client_cancel_reaches_the_workers_guest(worker: InProcessWorker,
                                                         link: NatsLink, caller: Host) -> None:
    """An MCP client cancels its tools/call of a remote tool spinning on a worker (30 s
    allowed): `wasmext mcp serve`'s cancel reaches the proxy, the proxy's reaches the
    worker, and the guest stops long before its time-out, nobody's fault."""
    import anyio
    from mcp.client.client import Client

    from wasmext.mcp.server.serve import McpToolServer

    (slow,) = attach(caller, link, entry("slowtool", timeout_ms=30_000, attempt_ms=30_000))
    before, cancels = worker.answered("slowtool"), worker.worker.cancelled
    server = McpToolServer(caller, poll_interval=0)
    waited: list[float] = []

    async def main() -> None:
        async with Client(server.server, read_timeout_seconds=30) as client:
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    await client.call_tool("slowtool__wait", {})
                tg.start_soon(call)
                await anyio.sleep(0.5)  # the worker's guest spins by now
                cancelled_at = time.monotonic()
                tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled
            while worker.answered("slowtool") == before:
                assert time.monotonic() - cancelled_at < 5.0
                await anyio.sleep(0.02)
            waited.append(time.monotonic() - cancelled_at)
    anyio.run(main)
    assert waited[0] < 3.0
    assert worker.worker.cancelled == cancels + 1 and slow.faults == 0


def test_quarantine_after_repeated_failures_then_healthy_answers(
        worker: InProcessWorker, link: NatsLink, caller: Host) -> None:
    trap, steady = attach(caller, link, entry("trap", quarantine_faults=3,
                                              quarantine_cooldown_ms=60_000), entry("steady"))
    outcomes = [caller.try_call("trap", "on_plain_text", "x")[1] for _ in range(3)]
    assert all(o is not None and o.startswith("trap:") for o in outcomes), outcomes
    answered = worker.answered("trap")
    started = time.monotonic()
    assert caller.try_call("trap", "on_plain_text", "x") == (None, "quarantined")
    assert time.monotonic() - started < 0.5
    assert worker.answered("trap") == answered  # refused here, no request sent
    assert trap.quarantined and caller.faults[-1].plugin_id == "trap"
    with caller.session() as s:
        assert s.on_plain_text("x").value == "alive"  # the chain goes on, the healthy one answers
        assert [(e.plugin_id, e.outcome) for e in s.trace.events] == [
            ("trap", "skipped"), ("steady", "changed")] or \
            [(e.plugin_id, e.outcome) for e in s.trace.events] == [
            ("steady", "changed"), ("trap", "skipped")]
    assert steady.faults == 0


def test_fail_closed_remote_plugin_aborts_the_hook(worker: InProcessWorker, link: NatsLink,
                                                   caller: Host) -> None:
    attach(caller, link, entry("trap", failure="closed"))
    with caller.session() as s, pytest.raises(HookAborted, match="fail-closed"):
        s.on_plain_text("x")


def test_no_worker_is_the_named_error_within_the_deadline(link: NatsLink, caller: Host,
                                                          worker: InProcessWorker) -> None:
    ghost = RemotePlugin(entry("ghost", timeout_ms=800, attempt_ms=200, retry=2), link,
                         PluginAdvert("ghost", "1.0.0", {"hooks": [{"hook": "on_plain_text"}]}))
    caller.add(ghost, source_kind="remote")
    started = time.monotonic()
    with pytest.raises(RemoteUnavailable, match=r"no worker serves wasmext\.plugin\.ghost\.v1"):
        ghost.call("on_plain_text", "x")
    assert time.monotonic() - started < 3.0
    assert ghost.faults == 1  # counts towards its quarantine like a local fault
    # Not served at all: refused at attach, named, nothing registered.
    assert attach(caller, link, entry("nobody", attempt_ms=200, retry=0)) == []
    assert isinstance(caller.load_errors[-1], RemoteUnavailable)
    assert "nobody" not in caller.plugins


HOSTILE: list[tuple[str, Any, str]] = [
    ("typo-hook", {"hooks": [{"hook": "on_plain_txt"}]}, "did you mean 'on_plain_text'"),
    ("bad-priority", {"hooks": [{"hook": "on_plain_text", "priority": 1000}]},
     "priority must be an int 0-100"),
    ("no-hooks", {"hooks": "all of them"}, "'hooks' must be an array"),
    ("bad-prompt", {"hooks": [], "prompt": [{"position": "everywhere", "content": "x"}]},
     "field 'prompt[0].position'"),
    ("many-hooks", {"hooks": [{"hook": "on_plain_text"}] * 300}, "300 hooks, over 256"),
    ("huge", {"hooks": [], "blob": "x" * (MAX_ADVERT_BYTES + 10)}, f"over {MAX_ADVERT_BYTES}"),
]


def test_hostile_advertised_registration_is_refused(worker: InProcessWorker, link: NatsLink,
                                                     caller: Host) -> None:
    """A rogue service on a remote plugin's subject advertises what it likes: each is
    refused with the named error (nothing registered), as a guest's map would be."""
    async def rogue(msg: Any) -> None:
        pid = msg.subject.split(".")[2]
        if pid == "impostor":
            body = encode(PluginAdvert("pii-mask", "1.0.0", {"hooks": []}), "application/msgpack")
        elif pid == "garbage":
            body = b"\xc1\xc1 not msgpack"
        elif pid == "bad-tool":
            body = encode(PluginAdvert(pid, "1.0.0", {"hooks": [{"hook": "on_tool"}], "tools": [
                {"name": "ok", "input_schema": {"type": "object"}},
                {"name": "evil", "input_schema": {"type": "object", "properties": {
                    "x": {"type": "string", "pattern": "(?<=a)b"}}}},
                {"name": "bad\nname"}]}), "application/msgpack")
        else:
            raw = dict((k, v) for k, v in ((h[0], h[1]) for h in HOSTILE))[pid]
            body = msgpack.packb({"plugin_id": pid, "version": "1.0.0", "registration": raw})
        await msg.respond(body)
    sub = link.run(link.client.subscribe("rogue.plugin.*.v1.describe", cb=rogue))
    try:
        ids = [h[0] for h in HOSTILE] + ["impostor", "garbage"]
        added = attach(caller, link, *[entry(pid, subject=f"rogue.plugin.{pid}.v1")
                                       for pid in ids])
        assert added == []
        refused = {e.plugin_id: e for e in caller.load_errors}
        for pid, _, why in HOSTILE:
            assert isinstance(refused[pid], RemoteRegistrationRefused), refused[pid]
            assert why in refused[pid].message, refused[pid].message
        assert "registration of 'pii-mask'" in refused["impostor"].message
        assert "not MessagePack" in refused["garbage"].message
        assert not caller.plugins and not caller.tools.tools
        # Tools are checked as a local plugin's: the good one registers, each bad one is
        # a load error naming it; the plugin itself loads.
        caller.load_errors.clear()
        assert len(attach(caller, link, entry("bad-tool", subject="rogue.plugin.bad-tool.v1"))) == 1
        assert list(caller.tools.tools) == ["bad-tool__ok"]
        assert len(caller.load_errors) == 2
        assert all("bad-tool tools[" in e.message for e in caller.load_errors)
        # Nothing of it leaks into what an operator reads unescaped.
        assert all("\n" not in e.describe() for e in caller.load_errors)
    finally:
        link.run(sub.unsubscribe())
    # A healthy remote plugin still answers.
    attach(caller, link, entry("steady"))
    assert caller.try_call("steady", "on_plain_text", "x")[0].value == "alive"  # type: ignore[union-attr]


def test_remote_config_section(tmp_path: Path) -> None:
    cfg = parse_config({"remote": {"agent-guard": {
        "subject": "wasmext.plugin.agent-guard.v0", "timeout_ms": 3000, "attempt_ms": 9000,
        "failure": "closed", "quarantine": {"faults": 2}}}})
    e = cfg.remote["agent-guard"]
    assert (e.timeout_ms, e.attempt_ms, e.failure, e.quarantine_faults) == (3000, 3000,
                                                                            "closed", 2)
    from wasmext.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        parse_config({"remote": {"Bad": {"subject": "a.>", "retry": 99, "extra": 1}}})
    for field in ("remote.Bad", "remote.Bad.subject", "remote.Bad.retry", "remote.Bad.extra"):
        assert f"field '{field}'" in info.value.message


def test_run_names_the_missing_nats_server_of_remote_plugins(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    from click.testing import CliRunner

    from wasmext_cli.main import main

    monkeypatch.delenv("WASMEXT_NATS_URL", raising=False)
    cfg = tmp_path / "host.toml"
    cfg.write_text('[host]\ndata_dir = "d"\n[remote.pii-mask]\n'
                   'subject = "wasmext.plugin.pii-mask.v0"\n')
    out = CliRunner().invoke(main, ["run", "--example", "--config", str(cfg)])
    assert out.exit_code == 2, out.output
    assert "[remote.*] plugins need a NATS server" in out.output


@pytest.mark.slow
def test_a_worker_killed_mid_call_fails_over_to_another(
        nats_url: str, link: NatsLink, tmp_path: Path, spawn: Any,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Worker A (a process) takes the call and spins; it is killed with SIGKILL mid-call.
    The attempt goes unanswered, and the retry, with the same call id, is answered by
    worker B, which came up meanwhile. Without a retry, the call fails named."""
    import signal

    hung, quick = tmp_path / "hung", tmp_path / "quick"
    hung.mkdir()
    quick.mkdir()
    wat = {"hung": guest_wat(SPIN, registration={"hooks": [{"hook": "on_plain_text"}]}),
           "quick": guest_wat(response={"ok": True, "value": "done"},
                              registration={"hooks": [{"hook": "on_plain_text"}]})}
    for folder in (hung, quick):
        _wat_folder(folder, "crawl", wat[folder.name])
    (tmp_path / "a.toml").write_text('[host]\ndata_dir = "data"\n[plugin.crawl]\n'
                                     'limits = { timeout_ms = 30000, fuel_per_call = '
                                     '1000000000000000 }\n')
    a = spawn("a", "worker", "--nats", nats_url, "--plugins", str(hung), "--config",
              str(tmp_path / "a.toml"), "--name", "A", "--prefix", "killed").wait_ready()
    host = Host(HostConfig(data_dir=tmp_path / "caller"), plugin_dirs=[])
    (crawl,) = attach_remote(host, link, {"crawl": entry(
        "crawl", subject="killed.plugin.crawl.v1", timeout_ms=10_000, attempt_ms=1500,
        retry=1)})
    box: dict[str, Any] = {}

    def call() -> None:
        box["result"] = host.try_call("crawl", "on_plain_text", "x")
    thread = threading.Thread(target=call)
    started = time.monotonic()
    thread.start()
    time.sleep(0.3)  # A holds the call now: it is the only worker
    b = InProcessWorker(nats_url, quick, tmp_path_factory.mktemp("b"), "B", prefix="killed")
    try:
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(10)
        thread.join(10)
        result, error = box["result"]
        assert error is None and result.value == "done"
        assert crawl.retries == 1 and crawl.by_worker == {"B": 1}
        assert time.monotonic() - started < 6.0
        # No retry allowed: the lost attempt is the named error, and fail-closed aborts.
        a2 = spawn("a2", "worker", "--nats", nats_url, "--plugins", str(hung), "--config",
                   str(tmp_path / "a.toml"), "--name", "A2", "--prefix", "lone").wait_ready()
        once = RemotePlugin(entry("crawl", subject="lone.plugin.crawl.v1", timeout_ms=10_000,
                                  attempt_ms=800, retry=0, failure="closed"), link,
                            crawl.advert)
        other = Host(HostConfig(data_dir=tmp_path / "other"), plugin_dirs=[])
        other.add(once, source_kind="remote", failure="closed")
        killer = threading.Timer(0.3, lambda: a2.proc.send_signal(signal.SIGKILL))
        killer.start()
        started = time.monotonic()
        with other.session() as s, pytest.raises(HookAborted) as info:
            s.on_plain_text("x")
        assert isinstance(info.value.cause, RemoteUnavailable), info.value.cause
        assert "no answer within 800 ms" in info.value.cause.message
        assert time.monotonic() - started < 3.0
        other.close()
    finally:
        b.close()
        host.close()


def test_a_remote_plugin_call_joins_the_callers_trace(worker: InProcessWorker,
                                                      link: NatsLink, caller: Host) -> None:
    """With tracing on, the proxy's client span carries `traceparent` to the worker,
    whose server span is its child (in-memory exporter: the shapes)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from wasmext.observe import tracing

    attach(caller, link, entry("steady"))
    exporter = InMemorySpanExporter()
    traced = tracing.Tracing.with_exporter(exporter)
    before = tracing.activate(traced)
    try:
        with traced.span("app.request") as app:
            assert caller.try_call("steady", "on_plain_text", "x")[0] is not None
    finally:
        tracing.activate(before)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    remote, served = spans["wasmext.remote plugin"], spans["wasmext.worker plugin"]
    # app.request > the host's hook span > the proxy's client span > the worker's span
    hook = next(x for x in spans.values()
                if remote.parent is not None and x.context.span_id == remote.parent.span_id)
    assert hook.name.startswith("wasmext.hook")
    assert hook.parent is not None and hook.parent.span_id == app.get_span_context().span_id
    assert served.parent is not None and served.parent.span_id == remote.context.span_id
    assert served.parent.is_remote and served.context.trace_id == remote.context.trace_id
    assert remote.attributes["wasmext.outcome"] == "ok"
    assert served.attributes["wasmext.plugin_id"] == "steady"
    assert served.attributes["wasmext.worker"] == "w1"


def test_list_shows_remote_plugins_and_names_those_not_reached(
        worker: InProcessWorker, nats_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`wasmext list` asks the workers of the config's [remote.ID] plugins what they
    serve: a served one is listed with its hooks in the order table, one no worker
    serves is a named error, and without a NATS server each is named as not reached."""
    import json

    from click.testing import CliRunner

    from wasmext_cli.main import main

    monkeypatch.delenv("WASMEXT_NATS_URL", raising=False)
    remote = ('[remote.steady]\nsubject = "wasmext.plugin.steady.v1"\n'
              '[remote.ghost]\nsubject = "wasmext.plugin.ghost.v1"\ntimeout_ms = 500\n'
              'attempt_ms = 500\n')
    (tmp_path / "none").mkdir()  # no local plugin, only the proxies
    local = '[host]\ndata_dir = "d"\n[plugins]\nuser_dir = "none"\nworkspace_dir = "none"\n'
    cfg = tmp_path / "host.toml"
    cfg.write_text(f'{local}[nats]\nurl = "{nats_url}"\n{remote}')
    out = CliRunner().invoke(main, ["list", "--json", "--config", str(cfg)])
    assert out.exit_code == 0, out.output
    listed = json.loads(out.stdout)
    assert [(p["id"], p["source"]) for p in listed["plugins"]] == [("steady", "remote")]
    assert [e["plugin"] for e in listed["order"]["on_plain_text"]] == ["steady"]
    assert len(listed["errors"]) == 1 and "ghost" in listed["errors"][0]

    cfg.write_text(local + remote)
    out = CliRunner().invoke(main, ["list", "--config", str(cfg)])
    assert out.exit_code == 1, out.output  # nothing listed, every plugin named as a problem
    assert "not loaded: ghost: a [remote] plugin, and no NATS server" in out.stderr
    assert "not loaded: steady: a [remote] plugin" in out.stderr


def test_a_rogue_workers_answers_are_held_to_a_guests_bounds(worker: InProcessWorker,
                                                              link: NatsLink,
                                                              caller: Host) -> None:
    """What a worker answers is checked as a local guest's answer: a value nested past
    max_msgpack_depth (900 deep broke the MCP reply's serialisation) is InvalidOutput;
    its error text reaches the operator cleaned and cut; its fuel figure is bounded."""
    deep = b"\x81\xa1a" + b"\x91" * 900 + b"\xc0"
    answers = [
        b"\x82\xa2ok\xc3\xa5value" + deep,
        msgpack.packb({"ok": False, "kind": "error", "code": "x\x1b[2J",
                       "message": "\x1b]0;owned\x07" + "m" * 500_000}),
        msgpack.packb({"ok": True, "value": {"a": []}, "fuel": 1 << 63}),
    ]

    async def rogue(msg: Any) -> None:
        if msg.subject.endswith(".describe"):
            await msg.respond(encode(PluginAdvert("deep", "1.0.0", {
                "hooks": [{"hook": "on_tool"}],
                "tools": [{"name": "t", "input_schema": {"type": "object"}}]}),
                "application/msgpack"))
        elif msg.subject.endswith(".call"):
            await msg.respond(answers.pop(0))
    sub = link.run(link.client.subscribe("rogue.plugin.deep.v1.*", cb=rogue))
    try:
        assert len(attach(caller, link, entry("deep", subject="rogue.plugin.deep.v1"))) == 1
        started = time.monotonic()
        first = caller.tools.call("deep__t", {})
        assert first["status"] == "error" and "nesting deeper than 64" in \
            first["error"]["message"], first
        second = caller.tools.call("deep__t", {})
        text = json.dumps(second)
        assert second["status"] == "error" and "\x1b" not in text and "\x07" not in text
        assert len(second["error"]["message"]) <= 400
        third = caller.plugins["deep"].plugin.call("on_tool", {"name": "t", "args": {}})
        assert third.value == {"a": []} and third.fuel <= 1 << 53
        assert time.monotonic() - started < 10
    finally:
        link.run(sub.unsubscribe())
    attach(caller, link, entry("steady"))
    assert caller.try_call("steady", "on_plain_text", "x")[0].value == "alive"  # type: ignore[union-attr]


@pytest.mark.parametrize("header", [{"Wasmext-Deadline": "\u00b2"},
                                    {"Wasmext-Calls-Left": "\u00b9\u00b2"}])
def test_a_header_of_unicode_digits_is_no_header(worker: InProcessWorker, link: NatsLink,
                                                 header: dict[str, str]) -> None:
    """str.isdigit() says yes to '\u00b2' and int() then raises: a caller's header like that
    made the worker drop the call unanswered (the caller waited its whole timeout)."""
    body = encode(PluginCall("on_plain_text", "x", None, None), "application/msgpack")
    started = time.monotonic()
    msg = link.request("wasmext.plugin.steady.v1.call", body,
                       {"Content-Type": "application/msgpack", **header}, 5)
    assert time.monotonic() - started < 3
    assert msgpack.unpackb(msg.data)["value"] == "alive"
