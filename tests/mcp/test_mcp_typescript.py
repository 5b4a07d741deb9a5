"""The official TypeScript SDK client (tests/mcp/npm, pinned) against `wasmext mcp serve`,
over stdio and streamable HTTP: the listChanged capability, a tools/list holding a good
plugin tool beside one whose plugin also declared schemas MCP forbids, and calls that
succeed or fail against a tool with an outputSchema (the SDK checks structuredContent)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from interop_support import (
    FINE,
    MIXED,
    TIMEOUT,
    cli_args,
    cli_env,
    free_port,
    http_serve,
    node,
    node_missing,
    tool_wat,
    write_plugin,
)

from wasmext.testing import guest_wat

pytestmark = pytest.mark.skipif(node_missing() is not None, reason=str(node_missing()))

CALLS = [{"name": "mixed__good", "arguments": {"q": "x"}},
         {"name": "mixed__good", "arguments": {"q": 5}},
         {"name": "fine__lookup", "arguments": {"q": "y"}},
         {"name": "pic__pic", "arguments": {}}]
PIC = tool_wat([{"name": "pic"}], value={"content": [
    {"type": "image", "data": b"\x89PNG\r\n\x1a\n", "mime_type": "image/png"},
    {"type": "resource_link", "uri": "file:///notes.txt", "name": "notes"},
    {"type": "resource", "uri": "mem://greeting", "mime_type": "text/plain", "text": "hi"}]})


DOCS = guest_wat(response={"ok": True, "value": "hello from docs"}, registration={
    "hooks": [{"hook": "on_resource"}, {"hook": "on_prompt"}],
    "resources": [{"uri": "notes://today", "name": "today", "mime_type": "text/plain"}],
    "resource_templates": [{"uri_template": "notes://day/{date}", "name": "day"}],
    "prompts": [{"name": "greet", "description": "Say hello",
                 "arguments": [{"name": "who", "required": True}]}]})


def ts_client(plan: dict[str, Any]) -> dict[str, Any]:
    proc = node("ts-client.mjs", json.dumps(plan))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def check_report(report: dict[str, Any]) -> None:
    assert report["steps"]["connect"] == {"ok": True}, report
    assert report["capabilities"]["tools"]["listChanged"] is True
    tools = {t["name"]: t for t in report["steps"]["listTools"]["ok"]}
    assert set(tools) == {"mixed__good", "fine__lookup", "pic__pic"}
    assert tools["mixed__good"]["outputSchema"]["type"] == "object"
    assert tools["mixed__good"]["title"] == "Good tool"
    # Its hints both claim safety and no operator vouched for them: not served.
    assert "annotations" not in tools["mixed__good"]
    ok, bad, plain, pic = report["calls"]
    assert "error" not in ok, ok  # the SDK validated structuredContent against outputSchema
    assert ok["result"]["structuredContent"] == {"found": 1}
    assert "error" not in bad, bad  # no "-32602 Structured content does not match"
    assert bad["result"]["isError"] is True
    assert "structuredContent" not in bad["result"]
    assert bad["result"]["content"][0]["text"].startswith("invalid: invalid arguments")
    assert plain["result"]["structuredContent"] == {"found": 1}
    assert pic["result"]["content"] == [
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "resource_link", "uri": "file:///notes.txt", "name": "notes"},
        {"type": "resource", "resource": {"uri": "mem://greeting", "mimeType": "text/plain",
                                          "text": "hi"}}]


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "plugins"
    write_plugin(folder, "mixed", MIXED)
    write_plugin(folder, "fine", FINE)
    write_plugin(folder, "pic", PIC)
    write_plugin(folder, "docs", DOCS)
    return folder


def test_typescript_client_over_stdio(plugins: Path, tmp_path: Path) -> None:
    args = cli_args("mcp", "serve", "--plugins", str(plugins))
    report = ts_client({"transport": "stdio", "command": args[0], "args": args[1:],
                        "env": cli_env(), "cwd": str(tmp_path), "calls": CALLS,
                        "resources": True, "readResource": "notes://day/2026-01-02",
                        "prompts": True,
                        "getPrompt": {"name": "docs__greet", "arguments": {"who": "x"}}})
    check_report(report)
    steps = report["steps"]
    assert steps["listResources"]["ok"] == [{"uri": "notes://today", "name": "today",
                                             "mimeType": "text/plain"}]
    assert steps["listResourceTemplates"]["ok"] == [{"uriTemplate": "notes://day/{date}",
                                                     "name": "day"}]
    assert steps["readResource"]["ok"] == [{"uri": "notes://day/2026-01-02",
                                            "text": "hello from docs"}]
    assert steps["listPrompts"]["ok"] == [{"name": "docs__greet", "description": "Say hello",
                                           "arguments": [{"name": "who", "required": True}]}]
    assert steps["getPrompt"]["ok"] == [{"role": "user", "content": {
        "type": "text", "text": "hello from docs"}}]


def test_typescript_client_over_streamable_http(plugins: Path, tmp_path: Path) -> None:
    with http_serve(plugins, tmp_path) as url:
        check_report(ts_client({"transport": "http", "url": url, "calls": CALLS}))


TOKEN = "s3cret-token-0123456789"


def test_typescript_client_needs_the_bearer_token(plugins: Path, tmp_path: Path) -> None:
    with http_serve(plugins, tmp_path, "--token-env", "MCP_TOKEN",
                    env={"MCP_TOKEN": TOKEN}) as url:
        refused = ts_client({"transport": "http", "url": url})
        assert "error" in refused["steps"]["connect"], refused
        assert refused["steps"]["connect"]["code"] == 401, refused
        wrong = ts_client({"transport": "http", "url": url,
                           "headers": {"Authorization": f"Bearer {TOKEN[:-1]}x"}})
        assert "error" in wrong["steps"]["connect"], wrong
        check_report(ts_client({"transport": "http", "url": url, "calls": CALLS,
                                "headers": {"Authorization": f"Bearer {TOKEN}"}}))


def test_non_loopback_needs_a_token(plugins: Path, tmp_path: Path) -> None:
    proc = subprocess.run(cli_args("mcp", "serve", "--plugins", str(plugins), "--http",
                                   str(free_port()), "--host", "0.0.0.0"),
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode != 0
    assert "needs a bearer token" in proc.stderr
