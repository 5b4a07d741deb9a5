"""Helpers the MCP interop tests share: plugin folders, a served HTTP host, node peers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import wasmtime

from support import free_port
from wasmext.mcp.server.serve import build_http_server
from wasmext.testing import guest_wat

ROOT = Path(__file__).resolve().parents[2]
NPM = ROOT / "tests" / "mcp" / "npm"
TIMEOUT = 30
GOOD_OUT = {"type": "object", "properties": {"found": {"type": "integer"}},
            "required": ["found"]}
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def tool_wat(tools: list[dict[str, Any]], body: str | None = None,
             value: Any = None, extra: dict[str, Any] | None = None, wat: str = "") -> str:
    registration: dict[str, Any] = {"hooks": [{"hook": "on_tool"}], "tools": tools}
    registration.update(extra or {})
    return guest_wat(body, response={"ok": True, "value": {"found": 1} if value is None
                                     else value},
                     registration=registration, extra=wat)


# One plugin with a good tool (outputSchema) beside two whose schemas MCP forbids.
MIXED = tool_wat([
    {"name": "good", "title": "Good tool", "input_schema": SCHEMA, "output_schema": GOOD_OUT,
     "annotations": {"readOnlyHint": True, "openWorldHint": False}},
    {"name": "stringly", "input_schema": {"type": "string"}},
    {"name": "listy", "output_schema": {"type": "array"}},
])
FINE = tool_wat([{"name": "lookup", "description": "Find it", "input_schema": SCHEMA}])


def write_plugin(parent: Path, pid: str, wat: str, manifest_extra: str = "") -> Path:
    folder = parent / pid
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "0.1.0"\nabi = 1\n'
                                        + manifest_extra)
    (folder / f"{pid}.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))
    return folder


def run(fn: Callable[[], Awaitable[None]], timeout: float = TIMEOUT) -> None:
    async def bounded() -> None:
        with anyio.fail_after(timeout):
            await fn()
    anyio.run(bounded)


def cli_env(**extra: str) -> dict[str, str]:
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")]),
           "PATH": os.environ.get("PATH", "")}
    env.update(extra)
    return env


def cli_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "wasmext_cli", *args]


@contextmanager
def served_http(host: Any, address: str = "127.0.0.1", **options: Any) -> Iterator[str]:
    """`host`'s tools over streamable HTTP on a free port of a loopback `address`; yields
    the /mcp url."""
    port = free_port()
    server = build_http_server(host, address, port, poll_interval=0.05, **options)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    ready = threading.Event()
    for _ in range(TIMEOUT * 100):
        if server.started or not thread.is_alive():
            break
        ready.wait(0.01)
    assert server.started
    try:
        shown = f"[{address}]" if ":" in address else address
        yield f"http://{shown}:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(TIMEOUT)


def node_missing() -> str | None:
    """Why the node peers cannot run here (None when they can)."""
    if shutil.which("node") is None:
        return "node is not installed (make toolchains installs it)"
    for package in ("@modelcontextprotocol/sdk", "@modelcontextprotocol/server-everything",
                    "@modelcontextprotocol/inspector"):
        if not (NPM / "node_modules" / package / "package.json").exists():
            return f"{package} is not installed (tests/mcp/npm/setup-npm.sh)"
    return None


def node(script: str, *args: str, timeout: float = 90, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(["node", str(NPM / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=NPM, env=full_env)


@contextmanager
def listening(argv: list[str], port: int, address: str = "127.0.0.1", **popen: Any
              ) -> Iterator[subprocess.Popen[Any]]:
    """`argv` started, handed over once it accepts connections on `address`:`port` (or has
    exited, or TIMEOUT passed), and stopped afterwards."""
    proc = subprocess.Popen(argv, **popen)
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection((address, port), timeout=1.0).close()
                break
            except OSError:
                time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def http_serve(plugins: Path, cwd: Path, *extra: str, env: dict[str, str] | None = None,
               address: str = "127.0.0.1") -> Iterator[str]:
    port = free_port()
    argv = cli_args("mcp", "serve", "--plugins", str(plugins), "--http", str(port),
                    "--host", address, *extra)
    with listening(argv, port, address, cwd=cwd, env=cli_env(**(env or {})),
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        shown = f"[{address}]" if ":" in address else address
        yield f"http://{shown}:{port}/mcp"
