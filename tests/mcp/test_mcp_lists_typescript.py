"""The official TypeScript SDK client (tests/mcp/npm, pinned) hears `wasmext mcp serve`
announce resources and prompts changes, over stdio and streamable HTTP: nothing while
nothing changes; after `wasmext enable` from another process adds a plugin with a
resource and a prompt (and no tool), resources and prompts list_changed but no tools
one, and the new lists hold the new items."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from interop_support import (
    FINE,
    ROOT,
    TIMEOUT,
    cli_args,
    cli_env,
    http_serve,
    node,
    node_missing,
    write_plugin,
)

from wasmext.testing import guest_wat

pytestmark = pytest.mark.skipif(node_missing() is not None, reason=str(node_missing()))


def catalog_wat(uri: str, prompt: str) -> str:
    return guest_wat(response={"ok": True, "value": "hello"}, registration={
        "hooks": [{"hook": "on_resource"}, {"hook": "on_prompt"}],
        "resources": [{"uri": uri, "name": prompt, "mime_type": "text/plain"}],
        "prompts": [{"name": prompt, "description": f"The {prompt} prompt"}]})


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """Plugins `docs`, `fine` (a tool) and `more`, disabled before the server starts."""
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "docs", catalog_wat("notes://today", "greet"))
    write_plugin(plugins, "fine", FINE)
    write_plugin(plugins, "more", catalog_wat("notes://more", "bye"))
    (tmp_path / "wasmext.toml").write_text(  # found in the cwd by every command below
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    done = subprocess.run(cli_args("disable", "more"), cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return tmp_path


def watch_plan(cwd: Path) -> dict[str, Any]:
    return {"resources": True, "prompts": True, "watch": {
        "quietMs": 1500, "trigger": cli_args("enable", "more"), "env": cli_env(),
        "cwd": str(cwd), "waitMs": TIMEOUT * 1000, "settleMs": 1000}}


def check(report: dict[str, Any]) -> None:
    assert report["steps"]["connect"] == {"ok": True}, report
    assert report["capabilities"]["resources"]["listChanged"] is True
    assert report["capabilities"]["prompts"]["listChanged"] is True
    steps = report["steps"]
    assert [r["uri"] for r in steps["listResources"]["ok"]] == ["notes://today"]
    assert [p["name"] for p in steps["listPrompts"]["ok"]] == ["docs__greet"]
    assert report["quiet"] == []  # polled 15 times, nothing changed: nothing sent
    assert steps["trigger"] == {"ok": True}, steps["trigger"]
    changed = report["changed"]
    assert "notifications/resources/list_changed" in changed, report
    assert "notifications/prompts/list_changed" in changed, report
    assert "notifications/tools/list_changed" not in changed  # the tools did not change
    assert len(changed) == 2, changed  # one of each: the rescan is one change
    assert [r["uri"] for r in steps["resourcesAfter"]["ok"]] == ["notes://today",
                                                                  "notes://more"]
    assert [p["name"] for p in steps["promptsAfter"]["ok"]] == ["docs__greet", "more__bye"]


def ts_client(plan: dict[str, Any]) -> dict[str, Any]:
    proc = node("ts-client.mjs", json.dumps(plan))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def test_typescript_client_hears_list_changes_over_stdio(workspace: Path) -> None:
    args = cli_args("mcp", "serve", "--plugins", "plugins", "--poll", "0.1")
    check(ts_client({"transport": "stdio", "command": args[0], "args": args[1:],
                     "env": cli_env(), "cwd": str(workspace), **watch_plan(workspace)}))


def test_typescript_client_hears_list_changes_over_http(workspace: Path) -> None:
    with http_serve(Path("plugins"), workspace, "--poll", "0.1") as url:
        check(ts_client({"transport": "http", "url": url, **watch_plan(workspace)}))


def test_typescript_client_hears_upstream_changes_through_a_gateway(tmp_path: Path) -> None:
    """`wasmext mcp serve --include-mcp-tools --include-mcp-catalog`: an upstream server
    (official Python SDK) adds a resource; the TypeScript client hears resources
    list_changed (not prompts) and lists the new resource, read through wasmext."""
    server = ROOT / "tests" / "mcp" / "servers" / "catalog_server.py"
    (tmp_path / "plugins").mkdir()
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
        f'[mcp]\nenabled = true\n[mcp.servers.catalog]\ntransport = "stdio"\n'
        f'command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(server))}]\n')
    args = cli_args("mcp", "serve", "--include-mcp-tools", "--include-mcp-catalog",
                    "--poll", "0.1")
    report = ts_client({
        "transport": "stdio", "command": args[0], "args": args[1:], "env": cli_env(),
        "cwd": str(tmp_path), "resources": True, "prompts": True,
        "readResource": "file:///first.txt", "watch": {
            "quietMs": 1500, "settleMs": 1000, "waitMs": TIMEOUT * 1000,
            "wanted": ["notifications/resources/list_changed"],
            "triggerCall": {"name": "catalog__add_resource",
                            "arguments": {"uri": "file:///second.txt", "name": "second"}}}})
    assert report["steps"]["connect"] == {"ok": True}, report
    steps = report["steps"]
    assert [r["uri"] for r in steps["listResources"]["ok"]] == ["file:///first.txt"]
    assert steps["readResource"]["ok"] == [{"uri": "file:///first.txt",
                                            "text": "contents of file:///first.txt"}]
    assert [p["name"] for p in steps["listPrompts"]["ok"]] == ["catalog__first"]
    assert report["quiet"] == []
    assert "error" not in steps["trigger"], steps["trigger"]
    assert report["changed"] == ["notifications/resources/list_changed"], report
    assert [r["uri"] for r in steps["resourcesAfter"]["ok"]] == ["file:///first.txt",
                                                                 "file:///second.txt"]
