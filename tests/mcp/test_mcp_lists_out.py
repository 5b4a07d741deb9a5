"""`wasmext mcp serve` tells its clients when the resources or prompts it serves change
(official Python SDK client, in process and over streamable HTTP, handshake era and
2026-era `subscriptions/listen`): advertised on every transport, sent for exactly the
lists that changed, not sent when nothing did (a reload with the same registration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
import wasmtime
from interop_support import TIMEOUT, run, served_http, tool_wat
from mcp.client.client import Client

from wasmext import Host, HostConfig
from wasmext.mcp.server.serve import McpToolServer
from wasmext.testing import guest_wat, make_host

KINDS = {types.ToolListChangedNotification: "tools",
         types.ResourceListChangedNotification: "resources",
         types.PromptListChangedNotification: "prompts"}


def docs_wasm(uri: str, prompt: str, name: str = "today") -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat(
        response={"ok": True, "value": "hello"}, registration={
            "hooks": [{"hook": "on_resource"}, {"hook": "on_prompt"}],
            "resources": [{"uri": uri, "name": name, "mime_type": "text/plain"}],
            "prompts": [{"name": prompt, "description": "Say hello"}]})))


TOOL = bytes(wasmtime.wat2wasm(tool_wat([{"name": "lookup"}])))


class Heard:
    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.arrived = anyio.Event()

    async def __call__(self, message: Any) -> None:
        kind = KINDS.get(type(message))
        if kind is not None:
            self.kinds.append(kind)
            self.arrived.set()

    async def take(self) -> set[str]:
        """The kinds heard so far (waiting for one), forgotten."""
        with anyio.fail_after(TIMEOUT):
            await self.arrived.wait()
        await anyio.sleep(0.3)  # a poll or two: whatever else this change sends
        kinds, self.kinds, self.arrived = set(self.kinds), [], anyio.Event()
        return kinds


async def uris(client: Client) -> list[str]:
    return [str(r.uri) for r in (await client.list_resources()).resources]


async def prompt_names(client: Client) -> list[str]:
    return [p.name for p in (await client.list_prompts()).prompts]


def add(host: Host, wasm: bytes, pid: str) -> Any:
    return anyio.to_thread.run_sync(lambda: host.add(wasm, plugin_id=pid, replace=True))


def test_in_process_only_changed_lists_are_announced(tmp_path: Path) -> None:
    with make_host((docs_wasm("notes://a", "greet"), {"plugin_id": "docs"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host:
        server = McpToolServer(host, poll_interval=0)  # checked at each request only
        heard = Heard()

        async def main() -> None:
            async with Client(server.server, mode="legacy", message_handler=heard,
                              read_timeout_seconds=TIMEOUT) as client:
                caps = client.session.server_capabilities
                assert caps is not None and caps.resources is not None and caps.prompts
                assert caps.resources.list_changed is True and caps.prompts.list_changed
                assert await uris(client) == ["notes://a"]
                assert await prompt_names(client) == ["docs__greet"]

                # The same registration loaded again: nothing changed, nothing sent.
                await add(host, docs_wasm("notes://a", "greet"), "docs")
                await client.list_tools()
                assert await uris(client) == ["notes://a"] and heard.kinds == []

                # A plugin with resources and prompts only: no tools/list_changed.
                await add(host, docs_wasm("notes://b", "bye"), "more")
                await client.list_tools()  # the check runs before the answer is sent
                assert sorted(heard.kinds) == ["prompts", "resources"]
                heard.kinds.clear()
                assert await uris(client) == ["notes://a", "notes://b"]
                assert await prompt_names(client) == ["docs__greet", "more__bye"]

                # A tool only: tools/list_changed alone.
                await add(host, TOOL, "tooly")
                await client.list_prompts()
                assert heard.kinds == ["tools"]
                heard.kinds.clear()

                # A resource renamed in place (reload): resources only.
                await add(host, docs_wasm("notes://b", "bye", name="renamed"), "more")
                await client.list_tools()
                assert heard.kinds == ["resources"]
                heard.kinds.clear()

                await anyio.to_thread.run_sync(host.unload, "more")
                await client.list_tools()
                assert sorted(heard.kinds) == ["prompts", "resources"]
                assert await uris(client) == ["notes://a"]

        run(main)


def test_http_poll_announces_both_eras(tmp_path: Path) -> None:
    with make_host((docs_wasm("notes://a", "greet"), {"plugin_id": "docs"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host, \
            served_http(host) as url:
        heard = Heard()

        async def main() -> None:
            async with Client(url, mode="legacy", message_handler=heard,
                              read_timeout_seconds=TIMEOUT) as client:
                caps = client.session.server_capabilities
                assert caps is not None and caps.resources is not None and caps.prompts
                assert caps.resources.list_changed is True and caps.prompts.list_changed
                assert await uris(client) == ["notes://a"]  # remembered for notifications
                await anyio.sleep(0.3)  # several polls with nothing changed
                assert heard.kinds == []
                await add(host, docs_wasm("notes://b", "bye"), "more")
                assert await heard.take() == {"resources", "prompts"}  # by the poll
                assert await uris(client) == ["notes://a", "notes://b"]
                assert await prompt_names(client) == ["docs__greet", "more__bye"]

            async with Client(url, read_timeout_seconds=TIMEOUT) as modern, \
                    modern.listen(resources_list_changed=True,
                                  prompts_list_changed=True) as sub:
                await anyio.to_thread.run_sync(host.unload, "more")
                with anyio.fail_after(TIMEOUT):
                    async for _event in sub:
                        break
                assert await uris(modern) == ["notes://a"]

        run(main)
