"""A real nats-server for the cluster tests, plugin folders, and worker processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from cluster_support import (
    PYTHONPATH,
    nats_server,
    wat_plugin,
)

from support import ROOT


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    with nats_server() as (url, _):
        yield url


@pytest.fixture(scope="session")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stamp (pre), answer (provider), tail (post), slow (pre, ~8 ms of work) and the
    real agent-guard validator (C, built with the ziglang toolchain)."""
    from wasmext_cli.build import ToolchainMissing, build_plugin

    parent = tmp_path_factory.mktemp("cluster-plugins")
    wat_plugin(parent, "stamp", "pre", {"message": {"payload": "stamped",
                                                     "metadata": {"pre": True}}})
    wat_plugin(parent, "answer", "provider", {"message": {
        "payload": "answered", "metadata": {"usage": {"prompt_tokens": 7}}}})
    wat_plugin(parent, "tail", "post", {"message": {"payload": "posted",
                                                     "metadata": {"post": True}},
                                         "context": {"posted": True}})
    wat_plugin(parent, "slow", "pre", {"message": {"payload": "slow", "metadata": {}}},
                spin=5_000_000)  # ~8 ms of work a call, within the default fuel
    wat_plugin(parent, "burn", "pre", {"message": {"payload": "never", "metadata": {}}},
                spin=200_000_000)  # past the default fuel: the sandbox stops it
    shutil.copytree(ROOT / "plugins" / "agent-guard", parent / "agent-guard",
                    ignore=shutil.ignore_patterns("*.wasm"))
    try:
        build_plugin(parent / "agent-guard")
    except ToolchainMissing as exc:
        pytest.skip(str(exc))
    return parent


class Proc:
    """A child process whose stderr is read until it prints `ready`."""

    def __init__(self, args: list[str], cwd: Path, log: Path) -> None:
        self.log_path = log
        self.log: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=self.log,
                                     env={**os.environ, "PYTHONPATH": PYTHONPATH})

    def wait_ready(self, timeout: float = 60) -> Proc:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"ready" in self.log_path.read_bytes().splitlines():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited {self.proc.returncode}: "
                                   f"{self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        raise TimeoutError(self.log_path.read_text()[-2000:])

    def signal(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    """spawn(name, *args): a `wasmext` child (or any argv) in its own folder, ready."""
    started: list[Proc] = []

    def start(name: str, *args: str, argv: list[str] | None = None) -> Proc:
        cwd = tmp_path / name
        cwd.mkdir()
        cmd = argv or [sys.executable, "-m", "wasmext_cli", *args]
        proc = Proc(cmd, cwd, tmp_path / f"{name}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="session")
def shared_workers(nats_url: str, plugin_dir: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Proc]]:
    """Two workers (s1, s2) for the tests that leave them running as they found them."""
    folder = tmp_path_factory.mktemp("shared-workers")
    procs = []
    try:
        for name in ("s1", "s2"):
            (folder / name).mkdir()
            procs.append(Proc([sys.executable, "-m", "wasmext_cli", "worker", "--nats", nats_url,
                               "--plugins", str(plugin_dir), "--name", name],
                              folder / name, folder / f"{name}.log").wait_ready())
        yield procs
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture
def worker(spawn: Any, nats_url: str, plugin_dir: Path) -> Any:
    """worker(name, concurrency=4): a `wasmext worker` serving plugin_dir, ready."""
    def start(name: str, concurrency: int = 4, prefix: str = "wasmext") -> Proc:
        return spawn(name, "worker", "--nats", nats_url, "--plugins", str(plugin_dir),
                     "--name", name, "--prefix", prefix,
                     "--concurrency", str(concurrency)).wait_ready()
    return start


@pytest.fixture
def foreign(spawn: Any, nats_url: str) -> Proc:
    """The nats-py-only extension of foreign_ext.py (prefix `wasmext`)."""
    script = str(Path(__file__).with_name("foreign_ext.py"))
    proc = spawn("foreign", argv=[sys.executable, script, nats_url, "wasmext"])
    deadline = time.monotonic() + 30
    assert proc.proc.stdout is not None
    line = proc.proc.stdout.readline()  # blocks until "ready" (or EOF if it died)
    if b"ready" not in line or time.monotonic() > deadline:
        raise RuntimeError(proc.log_path.read_text())
    return proc
