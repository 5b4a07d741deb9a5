"""Configured servers' resources and prompts follow their list_changed notifications
(official Python SDK low-level server, tests/mcp/servers/catalog_server.py): a server
that announces changes is listed once and again only after a notification; a burst of
notifications costs at most two listings; subscribers hear a change only when the list
differs; the app and plugins see the new item; hostile names are cleaned."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import wasmtime
from interop_support import ROOT, TIMEOUT

from wasmext import Host, HostConfig
from wasmext.mcp.client.catalog import get_prompt, list_prompts, list_resources
from wasmext.mcp.config import McpServerConfig
from wasmext.testing import DATA_AT, guest_wat, make_host

CATALOG = str(ROOT / "tests" / "mcp" / "servers" / "catalog_server.py")
HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


def plugin_asking(request: dict[str, object]) -> bytes:
    """A plugin whose `go` hook answers whatever one host call answered (ABI minor 1)."""
    req = msgpack.packb(request)
    return bytes(wasmtime.wat2wasm(guest_wat(
        f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))", imports=HOST_CALL,
        data=req, registration={"hooks": [{"hook": "go"}], "abi_minor": 1})))


@contextmanager
def catalog_host(tmp_path: Path, quiet: bool = False) -> Iterator[Host]:
    server = McpServerConfig("catalog", "stdio", sys.executable, (CATALOG,),
                             {"CATALOG_QUIET": "1"} if quiet else {},
                             connect_timeout_s=TIMEOUT, call_timeout_s=TIMEOUT)
    with make_host(config=HostConfig(data_dir=tmp_path / ".wasmext",
                                     mcp_servers=(server,))) as host:
        clients = host.start_mcp()
        assert clients is not None and clients.status("catalog") == "connected"
        yield host


def call(host: Host, tool: str, **args: object) -> str:
    done = host.tools.execute(f"catalog__{tool}", dict(args))
    assert done["status"] == "ok", done
    return str(done["output"])


def counts(host: Host) -> dict[str, int]:
    found: dict[str, int] = json.loads(call(host, "counts"))
    return found


class Heard:
    """What the catalog's subscribers hear, with a bounded wait."""

    def __init__(self, host: Host) -> None:
        assert host.mcp is not None
        self.events: list[tuple[str, str]] = []
        self._arrived = threading.Condition()
        host.mcp.catalog.subscribe(self._hear)

    def _hear(self, server: str, kind: str) -> None:
        with self._arrived:
            self.events.append((server, kind))
            self._arrived.notify_all()

    def wait(self, count: int) -> list[tuple[str, str]]:
        with self._arrived:
            assert self._arrived.wait_for(lambda: len(self.events) >= count, TIMEOUT), \
                self.events
            return list(self.events)


def settled(host: Host, kind: str) -> None:
    """Wait until the re-list a notification started has put a list back."""
    assert host.mcp is not None
    deadline = time.monotonic() + TIMEOUT
    while host.mcp.catalog.cached("catalog", kind) is None:
        assert time.monotonic() < deadline, f"{kind} never re-listed"
        time.sleep(0.01)


def test_announced_lists_are_kept_and_followed(tmp_path: Path) -> None:
    with catalog_host(tmp_path) as host:
        assert host.mcp is not None
        heard = Heard(host)
        uris = [r["uri"] for r in list_resources(host.mcp, "catalog")]
        assert uris == ["file:///first.txt"]
        for _ in range(3):  # kept: asked of the server once
            assert [r["uri"] for r in list_resources(host.mcp, "catalog")] == uris
        assert [p["name"] for p in list_prompts(host.mcp, "catalog")] == ["first"]
        assert counts(host) == {"resources": 1, "prompts": 1}

        # Notifications with nothing changed: re-listed, nobody told.
        call(host, "announce", kind="resources", times=5)
        settled(host, "resources")
        assert 2 <= counts(host)["resources"] <= 6
        assert heard.events == []

        # A burst handled before its re-list runs costs one listing, not five.
        before = counts(host)["resources"]

        async def burst(session: Any) -> None:
            assert host.mcp is not None
            relists = [host.mcp.catalog.changed("catalog", "resources", session)
                       for _ in range(5)]  # in one go, as the message handler would
            for relist in relists:
                await relist()
        host.mcp.request("catalog", burst)
        assert counts(host)["resources"] == before + 1
        assert host.mcp.catalog.cached("catalog", "resources") is not None

        # A new resource: announced, re-listed, heard once, seen by the app and a plugin.
        call(host, "add_resource", uri="file:///second.txt", name="second\x1b[31m\u202e",
             description="line one\nline two\x07")
        assert heard.wait(1) == [("catalog", "resources")]
        listed = {r["uri"]: r for r in list_resources(host.mcp, "catalog")}
        assert set(listed) == {"file:///first.txt", "file:///second.txt"}
        assert listed["file:///second.txt"]["name"] == "second\\x1b[31m\\u202e"  # inert
        assert "\x07" not in listed["file:///second.txt"]["description"]
        host.add(plugin_asking({"op": "resource.list", "server": "catalog"}),
                 plugin_id="lister", grants={"resources", "resources:catalog__file:///sec*"})
        result, error = host.try_call("lister", "go", {})
        assert result is not None, error
        assert [r["uri"] for r in result.value] == ["file:///second.txt"]

        # An unsafe URI is not listed (it could not be shown or read back faithfully).
        call(host, "add_resource", uri="file:///evil\u202etxt.exe", name="evil")
        settled(host, "resources")
        assert "file:///evil\u202etxt.exe" not in {
            r["uri"] for r in list_resources(host.mcp, "catalog")}

        # A new prompt: heard as prompts only; listed and got.
        before = len(heard.events)
        call(host, "add_prompt", name="second", description="Another")
        assert heard.wait(before + 1)[before:] == [("catalog", "prompts")]
        assert [p["name"] for p in list_prompts(host.mcp, "catalog")] == ["first", "second"]
        got = get_prompt(host.mcp, "catalog", "second")
        assert got["messages"][0]["content"]["text"] == "prompt second"


def test_unannounced_lists_are_asked_each_time(tmp_path: Path) -> None:
    with catalog_host(tmp_path, quiet=True) as host:
        assert host.mcp is not None
        heard = Heard(host)
        for _ in range(3):
            assert [r["uri"] for r in list_resources(host.mcp, "catalog")] == [
                "file:///first.txt"]
        assert counts(host)["resources"] == 3  # it could change unannounced: never kept
        assert host.mcp.catalog.cached("catalog", "resources") is None
        call(host, "add_resource", uri="file:///second.txt", name="second")
        assert heard.wait(1) == [("catalog", "resources")]  # a notification is still followed
        assert "file:///second.txt" in {r["uri"] for r in list_resources(host.mcp, "catalog")}


def test_stopping_a_server_forgets_its_kept_lists(tmp_path: Path) -> None:
    with catalog_host(tmp_path) as host:
        assert host.mcp is not None
        list_resources(host.mcp, "catalog")
        assert host.mcp.catalog.cached("catalog", "resources") is not None
        host.mcp.stop_server("catalog")
        assert host.mcp.catalog.cached("catalog", "resources") is None


def test_a_gateway_forwards_upstream_list_changes(tmp_path: Path) -> None:
    """`wasmext mcp serve --include-mcp-catalog`: the server's resources and prompts are
    served, and its list_changed reaches our clients only when its list changed."""
    import anyio
    import anyio.to_thread
    import mcp_types as types
    from interop_support import run
    from mcp.client.client import Client

    from wasmext.mcp.server.serve import McpToolServer

    with catalog_host(tmp_path) as host:
        server = McpToolServer(host, include_mcp_catalog=True, poll_interval=0.05)
        kinds: list[str] = []

        async def on_message(message: object) -> None:
            if isinstance(message, types.ResourceListChangedNotification):
                kinds.append("resources")
            elif isinstance(message, types.PromptListChangedNotification):
                kinds.append("prompts")

        async def upstream(tool: str, **args: object) -> None:
            await anyio.to_thread.run_sync(lambda: call(host, tool, **args))

        async def heard(kind: str) -> None:
            with anyio.fail_after(TIMEOUT):
                while kind not in kinds:
                    await anyio.sleep(0.02)

        async def main() -> None:
            async with Client(server.server, mode="legacy", message_handler=on_message,
                              read_timeout_seconds=TIMEOUT) as client:
                listed = (await client.list_resources()).resources
                assert [str(r.uri) for r in listed] == ["file:///first.txt"]
                read = await client.read_resource("file:///first.txt")
                assert read.contents[0].text == "contents of file:///first.txt"  # type: ignore[union-attr]
                assert [p.name for p in (await client.list_prompts()).prompts] == [
                    "catalog__first"]

                await upstream("announce", kind="resources", times=3)  # nothing changed
                await anyio.sleep(0.5)  # the re-list and ten polls
                assert kinds == []

                await upstream("add_resource", uri="file:///second.txt", name="second")
                await heard("resources")
                listed = (await client.list_resources()).resources
                assert [str(r.uri) for r in listed] == ["file:///first.txt",
                                                        "file:///second.txt"]
                await upstream("add_prompt", name="second")
                await heard("prompts")
                got = await client.get_prompt("catalog__second")
                assert got.messages[0].content.text == "prompt second"  # type: ignore[union-attr]
                assert kinds == ["resources", "prompts"]

        run(main)


def test_an_endless_resource_list_is_bounded(tmp_path: Path) -> None:
    """Attack: a server answering pages of resources with a next cursor forever. The
    listing stops at 1000 entries (4 pages), quickly, and the server stays usable."""
    from wasmext.mcp.client.catalog import MAX_LISTED

    with catalog_host(tmp_path) as host:
        assert host.mcp is not None
        heard = Heard(host)
        started = time.monotonic()
        call(host, "flood")
        assert heard.wait(1) == [("catalog", "resources")]  # followed, and bounded
        listed = list_resources(host.mcp, "catalog")
        assert len(listed) == MAX_LISTED
        assert listed[-1]["uri"] == f"file:///flood/{MAX_LISTED - 1}"
        assert counts(host)["resources"] == 4  # 4 pages of 300, then it stopped asking
        assert time.monotonic() - started < TIMEOUT
        got = get_prompt(host.mcp, "catalog", "first")  # still answering
        assert got["messages"][0]["content"]["text"] == "prompt first"


def test_a_gateway_serves_upstream_resource_templates(tmp_path: Path) -> None:
    """Templates are listed, a URI only a template fits is read from its server, and a
    new template reaches our clients as a resources list_changed."""
    import anyio
    import anyio.to_thread
    import mcp_types as types
    from interop_support import run
    from mcp.client.client import Client

    from wasmext.mcp.client.catalog import list_resource_templates
    from wasmext.mcp.server.serve import McpToolServer

    with catalog_host(tmp_path) as host:
        assert host.mcp is not None
        assert [t["uri_template"] for t in list_resource_templates(host.mcp, "catalog")] == [
            "file:///notes/{day}"]
        server = McpToolServer(host, include_mcp_catalog=True, poll_interval=0.05)
        kinds: list[str] = []

        async def on_message(message: object) -> None:
            if isinstance(message, types.ResourceListChangedNotification):
                kinds.append("resources")

        async def main() -> None:
            async with Client(server.server, mode="legacy", message_handler=on_message,
                              read_timeout_seconds=TIMEOUT) as client:
                listed = (await client.list_resource_templates()).resource_templates
                assert [(t.uri_template, t.name) for t in listed] == [
                    ("file:///notes/{day}", "notes")]
                read = await client.read_resource("file:///notes/monday")
                assert read.contents[0].text == "contents of file:///notes/monday"  # type: ignore[union-attr]
                await anyio.to_thread.run_sync(lambda: call(
                    host, "add_template", uri_template="file:///logs/{id}", name="logs"))
                with anyio.fail_after(TIMEOUT):
                    while "resources" not in kinds:
                        await anyio.sleep(0.02)
                listed = (await client.list_resource_templates()).resource_templates
                assert [t.uri_template for t in listed] == ["file:///notes/{day}",
                                                            "file:///logs/{id}"]

        run(main)


def test_hostile_upstream_templates_are_bounded_and_cleaned(tmp_path: Path) -> None:
    """Attack: 5003 templates, one with a 100,000-character URI template, one with an
    escape sequence in it, one with a terminal-title escape and a bidi override in its
    name. The listing stops at 1000 entries, skips the unusable, cleans the rest, and
    the server keeps answering."""
    from wasmext.mcp.client.catalog import MAX_LISTED, MAX_URI, list_resource_templates
    from wasmext.text import is_unsafe

    with catalog_host(tmp_path) as host:
        assert host.mcp is not None
        heard = Heard(host)
        list_resource_templates(host.mcp, "catalog")  # seen once: a change is news
        started = time.monotonic()
        call(host, "hostile_templates")
        assert heard.wait(1) == [("catalog", "resources")]
        listed = list_resource_templates(host.mcp, "catalog")
        assert time.monotonic() - started < TIMEOUT
        assert len(listed) <= MAX_LISTED
        assert all(len(t["uri_template"]) <= MAX_URI for t in listed)
        assert not any(is_unsafe(c) for t in listed for v in t.values() for c in v)
        assert not any(t["name"] in ("huge", "escape") for t in listed)  # skipped whole
        ok = next(t for t in listed if t["uri_template"] == "file:///ok/{a}")
        assert "owned" in ok["name"]  # shown inert, not obeyed
        got = get_prompt(host.mcp, "catalog", "first")  # still answering
        assert got["messages"][0]["content"]["text"] == "prompt first"
