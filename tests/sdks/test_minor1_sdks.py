"""The minor-1 wrappers of every guest SDK, through its conformance plugin.

Hooks every conformance plugin has for this: `fetch` (data: url → http.fetch),
`llm` (data: prompt → llm.complete, max_tokens 50), `turn` (data: agent →
agents.request with input "ping") and `step` (the same through agents.send);
each answers the host's whole answer map. The minor-1 conformance vectors
(abi/vectors/host_calls.json) go through each plugin's `host` hook too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopback import Loopback, loopback
from support import SDK_LANGS, SDK_ROOT, built_module, run_cache
from wasmext import Host, HostConfig, Runtime
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmSettings

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "abi" / "vectors" /
                      "host_calls.json").read_text())["minor_1"]
# Every SDK's conformance plugin has the minor-1 hooks, the component SDKs' too.
WORLD_SDKS = list(SDK_LANGS)


@pytest.fixture(scope="module")
def server() -> Iterator[Loopback]:
    with loopback() as srv:
        yield srv


def conformance_wasm(lang: str) -> Path:
    """The SDK's conformance module, built and compiled into the run's cache once."""
    from wasmext_cli.build import ToolchainMissing

    try:
        return built_module(SDK_ROOT / lang / "conformance")
    except ToolchainMissing as exc:
        pytest.skip(str(exc))


def world_host(lang: str, grants: set[str]) -> tuple[Host, Any, list[Any]]:
    def model(req: ChatRequest) -> ChatAnswer:
        return ChatAnswer("vector answer", "stop", 3, 2, req.model)

    host = Host(HostConfig(llm=LlmSettings(model="vector-model"), state_backend="memory"),
                runtime=Runtime(cache=run_cache()), plugin_dirs=[], llm=model)
    sent: list[Any] = []
    arrived = threading.Event()
    host.agents.register("echo", lambda data: {"echo": data})
    host.agents.register("inbox", lambda data: (sent.append(data), arrived.set()))
    plugin = host.add(conformance_wasm(lang), plugin_id=f"conf-{lang}", grants=grants)
    return host, plugin, [sent, arrived]


@pytest.mark.parametrize("lang", WORLD_SDKS)
def test_wrappers(lang: str, server: Loopback) -> None:
    grants = {"http", "http:127.0.0.1", "llm", "agents", "agents:echo", "agents:inbox"}
    host, plugin, (sent, arrived) = world_host(lang, grants)
    try:
        fetched = plugin.call("fetch", server.url("/hello")).value
        assert fetched["ok"] is True
        assert (fetched["value"]["status"], fetched["value"]["body"]) == (200, b"hi")
        metadata = plugin.call("fetch", "http://169.254.169.254/latest/").value
        assert metadata["error"]["code"] == "denied"
        completed = plugin.call("llm", "hi").value["value"]
        assert (completed["text"], completed["usage"]) == ("vector answer",
                                                           {"input": 3, "output": 2})
        assert plugin.call("turn", "echo").value == {"ok": True, "value": {"echo": "ping"}}
        assert plugin.call("turn", "nobody").value["error"]["code"] == "denied"
        assert plugin.call("step", "inbox").value == {"ok": True, "value": None}
        assert arrived.wait(5) and sent == ["ping"]
    finally:
        host.close()


@pytest.mark.parametrize("lang", WORLD_SDKS)
def test_vectors_through_the_host_hook(lang: str) -> None:
    host, plugin, _ = world_host(lang, set())
    try:
        for vector in VECTORS:
            plugin.set_grants(frozenset(vector["grants"]))
            answer = plugin.call("host", vector["request"]).value
            got = {"value": answer["value"]} if answer["ok"] else {
                "code": answer["error"]["code"]}
            want = {"value": vector["value"]} if "value" in vector else {"code": vector["code"]}
            assert got == want, (lang, vector)
    finally:
        host.close()



MCP_REQUESTS = [
    {"op": "resource.list", "server": "docs"},
    {"op": "resource.read", "server": "docs", "uri": "file:///a.txt"},
    {"op": "prompt.list", "server": "docs"},
    {"op": "prompt.get", "server": "docs", "name": "review", "args": {"code": "x"}},
]


@pytest.mark.parametrize("lang", ["python", "javascript"])
def test_component_mcp_and_progress_wrappers_agree_with_the_raw_op(lang: str) -> None:
    """Each wrapper answers what the same op sent raw answers (here: no such server,
    then no grant), and progress outside a tool call is not delivered."""
    host, plugin, _ = world_host(lang, {"resources", "resources:*", "prompts", "prompts:*"})
    try:
        for grants in ({"resources", "resources:*", "prompts", "prompts:*"}, set()):
            plugin.set_grants(frozenset(grants))
            for req in MCP_REQUESTS:
                wrapped = plugin.call("mcp", req).value
                raw = plugin.call("host", req).value
                assert wrapped["ok"] is raw["ok"] is False, (lang, req, wrapped, raw)
                assert wrapped["error"]["code"] == raw["error"]["code"], (lang, req)
            code = plugin.call("mcp", MCP_REQUESTS[0]).value["error"]["code"]
            assert code == ("unavailable" if grants else "denied"), (lang, grants, code)
        step = {"op": "progress", "progress": 1, "total": 2, "message": "half"}
        raw_progress = plugin.call("host", step).value
        wrapped_progress = plugin.call("mcp", step).value
        assert wrapped_progress["ok"] is raw_progress["ok"]
        if raw_progress["ok"]:
            assert wrapped_progress["value"] is bool(raw_progress["value"]["delivered"])
        else:
            assert wrapped_progress["error"]["code"] == raw_progress["error"]["code"]
    finally:
        host.close()
