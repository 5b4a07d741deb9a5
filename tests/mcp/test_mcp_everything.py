"""The reference "everything" server (tests/mcp/npm, pinned) into wasmext, over stdio and
streamable HTTP: its tools join the registry and answer through it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import msgpack
import pytest
import wasmtime
from interop_support import NPM, TIMEOUT, free_port, listening, node_missing, run
from mcp.client.client import Client

from wasmext import Host, HostConfig
from wasmext.mcp.client.catalog import get_prompt, list_prompts, list_resources, read_resource
from wasmext.mcp.config import McpServerConfig
from wasmext.mcp.server.serve import McpToolServer
from wasmext.testing import DATA_AT, guest_wat, make_host

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'

pytestmark = pytest.mark.skipif(node_missing() is not None, reason=str(node_missing()))
EVERYTHING = NPM / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" \
    / "index.js"


def everything_stdio() -> McpServerConfig:
    return McpServerConfig("everything", "stdio", "node", (str(EVERYTHING), "stdio"),
                           connect_timeout_s=TIMEOUT, call_timeout_s=TIMEOUT)


@contextlib.contextmanager
def everything_http() -> Iterator[McpServerConfig]:
    port = free_port()
    with listening(["node", str(EVERYTHING), "streamableHttp"], port, cwd=NPM,
                   env={**os.environ, "PORT": str(port)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL):
        yield McpServerConfig("everything", "http", url=f"http://127.0.0.1:{port}/mcp",
                              connect_timeout_s=TIMEOUT, call_timeout_s=TIMEOUT)


@contextlib.contextmanager
def host_with(server: McpServerConfig, tmp_path: Path) -> Iterator[Host]:
    with make_host(config=HostConfig(data_dir=tmp_path / ".wasmext",
                                     mcp_servers=(server,))) as host:
        clients = host.start_mcp()
        assert clients is not None
        assert clients.status("everything") == "connected", clients.status("everything")
        yield host


def check_echo(host: Host) -> None:
    assert "everything__echo" in host.tools.tools
    payload = "héllo ✓ 𝄞 " * 10_000  # 100,000 characters of Unicode, intact
    result = host.tools.execute("everything__echo", {"message": payload})
    assert result["status"] == "ok", result
    assert result["output"] == f"Echo: {payload}"
    refused = host.tools.execute("everything__echo", {"message": 5})
    assert refused["status"] == "error" and refused["error"]["code"] == "invalid"


def check_content(host: Host) -> None:
    image = host.tools.execute("everything__get-tiny-image", {})
    assert image["status"] == "ok", image
    kinds = [b["type"] for b in image["output"]["content"]]
    assert kinds == ["text", "image", "text"]
    picture = image["output"]["content"][1]
    assert picture["mime_type"] == "image/png" and picture["data"].startswith(b"\x89PNG")

    tool = host.tools.tools["everything__get-resource-links"]  # metadata carried in
    assert tool.title == "Get Resource Links Tool"
    assert tool.annotations == {"readOnlyHint": True, "destructiveHint": False,
                                "idempotentHint": True, "openWorldHint": False}
    links = host.tools.execute("everything__get-resource-links", {"count": 2})
    assert links["status"] == "ok", links
    found = [b for b in links["output"]["content"] if b["type"] == "resource_link"]
    assert len(found) == 2 and all(b["uri"] and b["name"] for b in found)

    embedded = host.tools.execute("everything__get-resource-reference",
                                  {"resourceType": "Text", "resourceId": 2})
    assert embedded["status"] == "ok", embedded
    resources = [b for b in embedded["output"]["content"] if b["type"] == "resource"]
    assert len(resources) == 1 and isinstance(resources[0]["text"], str)


def check_resources_and_prompts(host: Host) -> None:
    assert host.mcp is not None
    resources = list_resources(host.mcp, "everything")
    static = [r for r in resources if r["uri"].startswith("demo://resource/static/document/")]
    assert static, resources
    blocks = read_resource(host.mcp, "everything", static[0]["uri"])
    assert blocks[0]["type"] == "resource" and blocks[0]["uri"] == static[0]["uri"]
    assert ("text" in blocks[0]) != ("blob" in blocks[0])
    prompts = {p["name"]: p for p in list_prompts(host.mcp, "everything")}
    assert {"simple-prompt", "args-prompt"} <= set(prompts)
    assert {"name": "city", "required": True, "description": "Name of the city"} in \
        prompts["args-prompt"]["arguments"]
    got = get_prompt(host.mcp, "everything", "args-prompt", {"city": "Lyon"})
    assert got["messages"][0]["role"] == "user"
    assert "Lyon" in got["messages"][0]["content"]["text"]

    # A plugin reaches them through the ops, only where its grants say.
    reader = plugin_asking({"op": "resource.read", "server": "everything",
                            "uri": static[0]["uri"]})
    wasm = bytes(wasmtime.wat2wasm(reader))
    host.add(wasm, plugin_id="reader", grants={"resources", "resources:everything__demo://*"})
    host.add(wasm, plugin_id="nosy", grants={"resources", "resources:everything__other://*"})
    result, error = host.try_call("reader", "go", {})
    assert result is not None and result.value == blocks, error
    result, error = host.try_call("nosy", "go", {})
    assert result is None and error is not None and error.startswith("denied"), error
    lister = plugin_asking({"op": "prompt.list", "server": "everything"})
    host.add(bytes(wasmtime.wat2wasm(lister)), plugin_id="lister",
             grants={"prompts", "prompts:everything__simple-*"})
    result, error = host.try_call("lister", "go", {})
    assert result is not None, error
    assert [p["name"] for p in result.value] == ["simple-prompt"]


def plugin_asking(request: dict[str, object]) -> str:
    """A plugin whose `go` hook answers whatever one host call answered."""
    req = msgpack.packb(request)
    return guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))",
                     imports=HOST_CALL, data=req,  # the resource/prompt ops are minor 1
                     registration={"hooks": [{"hook": "go"}], "abi_minor": 1})


def test_everything_over_stdio(tmp_path: Path) -> None:
    with host_with(everything_stdio(), tmp_path) as host:
        check_echo(host)
        check_content(host)
        check_resources_and_prompts(host)


def test_everything_over_streamable_http(tmp_path: Path) -> None:
    with everything_http() as server, host_with(server, tmp_path) as host:
        check_echo(host)
        check_content(host)


def wait_for_tool(host: Host, name: str) -> bool:
    """Conditional tools arrive after initialize (a list_changed the host follows)."""
    deadline = time.monotonic() + TIMEOUT
    while name not in host.tools.tools and time.monotonic() < deadline:
        time.sleep(0.05)
    return name in host.tools.tools


def test_client_capabilities_roots_sampling_elicitation(tmp_path: Path) -> None:
    asked: list[str] = []

    def model(server: str, params: types.CreateMessageRequestParams) -> Any:
        asked.append(server)
        return types.CreateMessageResult(role="assistant", model="host-model",
                                         content=types.TextContent(text="the host's model"))

    allowed = dataclasses.replace(everything_stdio(), roots=("file:///srv/data",),
                                  sampling=True)
    with make_host(config=HostConfig(data_dir=tmp_path / "a", mcp_servers=(allowed,))) as host:
        assert host.start_mcp(sampler=model) is not None
        assert wait_for_tool(host, "everything__trigger-sampling-request")
        sampled = host.tools.execute("everything__trigger-sampling-request",
                                     {"prompt": "hello", "maxTokens": 10})
        assert sampled["status"] == "ok", sampled
        assert "the host's model" in json.dumps(sampled["output"])
        assert asked == ["everything"]
        assert wait_for_tool(host, "everything__get-roots-list")
        roots = host.tools.execute("everything__get-roots-list", {})
        assert "file:///srv/data" in json.dumps(roots["output"])
        # Elicitation is never offered, so the server does not offer its elicitation tool.
        assert "everything__trigger-elicitation-request" not in host.tools.tools

    with make_host(config=HostConfig(data_dir=tmp_path / "b",
                                     mcp_servers=(everything_stdio(),))) as host:
        assert host.start_mcp(sampler=model) is not None  # a model, but no opt-in
        assert wait_for_tool(host, "everything__get-roots-list")
        assert "everything__trigger-sampling-request" not in host.tools.tools
        assert asked == ["everything"]


def test_progress_and_cancel_through_wasmext(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """An MCP client of `wasmext mcp serve` calls the everything server's long operation:
    its progress comes through, and cancelling ends the call at once (audited)."""
    with everything_http() as server, host_with(server, tmp_path) as host, \
            caplog.at_level(logging.INFO, logger="wasmext.mcp.audit"):
        served = McpToolServer(host, include_mcp_tools=True, poll_interval=0)
        seen: list[tuple[float, float | None]] = []

        async def main() -> None:
            upstream_step = anyio.Event()

            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append((value, total))
                if value >= 1 and total == 300:
                    upstream_step.set()

            async with Client(served.server, mode="legacy",
                              read_timeout_seconds=TIMEOUT) as client:
                async with anyio.create_task_group() as tg:
                    async def call() -> None:
                        await client.call_tool("everything__trigger-long-running-operation",
                                               {"duration": 60, "steps": 300},
                                               progress_callback=progress)
                        pytest.fail("the call was not cancelled")
                    tg.start_soon(call)
                    await upstream_step.wait()
                    tg.cancel_scope.cancel()
                echoed = await client.call_tool("everything__echo", {"message": "still here"})
                assert not echoed.is_error

        started = time.monotonic()
        run(main)
        assert time.monotonic() - started < 30  # the operation would take 60 s
        assert (1.0, 300.0) in seen
    audit = [r.getMessage() for r in caplog.records if r.name == "wasmext.mcp.audit"]
    assert any("trigger-long-running-operation' status=cancelled" in line for line in audit)
