"""The MCP Inspector's CLI mode (tests/mcp/npm, pinned) against `wasmext mcp serve`, over
stdio and streamable HTTP (with the bearer token)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from interop_support import (
    FINE,
    MIXED,
    NPM,
    TIMEOUT,
    cli_args,
    cli_env,
    http_serve,
    node_missing,
    write_plugin,
)

pytestmark = [pytest.mark.slow,  # the MCP Inspector started through npx, per transport
              pytest.mark.skipif(node_missing() is not None, reason=str(node_missing()))]
INSPECTOR = NPM / "node_modules" / ".bin" / "mcp-inspector"
TOKEN = "inspector-token-0123456789"


def inspect(target: list[str], *method: str) -> Any:
    proc = subprocess.run(["node", str(INSPECTOR), "--cli", *target, *method],
                          capture_output=True, text=True, timeout=TIMEOUT * 3, cwd=NPM,
                          env=cli_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def check(target: list[str]) -> None:
    listed = inspect(target, "--method", "tools/list")
    names = {t["name"] for t in listed["tools"]}
    assert names == {"mixed__good", "fine__lookup"}
    ok = inspect(target, "--method", "tools/call", "--tool-name", "mixed__good",
                 "--tool-arg", "q=x")
    assert ok["structuredContent"] == {"found": 1} and not ok.get("isError")
    bad = inspect(target, "--method", "tools/call", "--tool-name", "mixed__good",
                  "--tool-arg", "q=5")
    assert bad["isError"] is True and "structuredContent" not in bad
    assert bad["content"][0]["text"].startswith("invalid: invalid arguments")


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "plugins"
    write_plugin(folder, "mixed", MIXED)
    write_plugin(folder, "fine", FINE)
    return folder


def test_inspector_over_stdio(plugins: Path) -> None:
    check(cli_args("mcp", "serve", "--plugins", str(plugins)))


def test_inspector_over_http_with_token(plugins: Path, tmp_path: Path) -> None:
    with http_serve(plugins, tmp_path, "--token-env", "MCP_TOKEN",
                    env={"MCP_TOKEN": TOKEN}) as url:
        check([url, "--transport", "http", "--header", f"Authorization: Bearer {TOKEN}"])
