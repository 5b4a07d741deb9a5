"""A NATS stage call's Python path on one side, in-process, without a socket or server.

    python benchmarks/nats_path_cost.py --side worker [--per-read N] [--canned]
    python benchmarks/nats_path_cost.py --side caller [--bare | --acall]
    ... --loop N   # for callgrind: N requests after the warm-up, between two lines on stdin

The worker side feeds a `wasmext worker`'s fast client, as one read each, `--per-read`
(16) requests as `Router.arun` sends them (the benchmark's `stamp` plugin, five headers,
a fresh trace and call id each): the parser, the `deliver_now` handler, the stage call
on the loop (its plugin on trial, as the default worker runs it) and the answer queued
and written, here to a stand-in socket. `--canned`: the stage call answers at once with
a made answer (what the worker does around it). The caller side runs `Router.arun` with
`--window` (16) in flight over a link on a stand-in socket; what it writes is answered
with the worker's answer, one read per turn of the loop. `--bare`: the link's request
alone (`link.arequest`), `--acall`: the remote caller without the pipeline.

What it leaves out is the event loop's and the socket's part (epoll, the stream
reader's task, the system calls), which depends on how many messages a read holds;
`nats_cost.py` measures the whole. Without `--loop` it prints CPU time per request
(`time.thread_time`, min and median of the rounds); under valgrind's callgrind
(`--instr-atstart=no`, `callgrind_control -i on PID` when it prints `go`, then a line on
stdin; `-d` and off when it prints `done`, then another line) the instructions over N.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_cluster import POLICY, _body, _plugins  # noqa: E402

from wasmext import Host, HostConfig, tune_gc  # noqa: E402
from wasmext.cluster.callids import CallIds  # noqa: E402
from wasmext.cluster.contract import ExtMessage, ExtResponse, encode  # noqa: E402
from wasmext.cluster.fastclient import header_block, new_client  # noqa: E402
from wasmext.cluster.link import NatsLink, _Replies  # noqa: E402
from wasmext.cluster.registry import parse_registry  # noqa: E402
from wasmext.cluster.remote import RemoteCaller  # noqa: E402
from wasmext.cluster.routing import Router  # noqa: E402
from wasmext.cluster.worker import Worker  # noqa: E402
from wasmext.runtime import Runtime  # noqa: E402

SUBJECT = "wasmext.ext.pre.stamp.v1"
_HPUB = re.compile(rb"HPUB (\S+) (\S+) (\d+) (\d+)\r\n")


class _Socket:
    """Stands in for the client's stream writer: keeps what is written."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.writes = 0
        self.transport = self

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.out.append(data)

    def writelines(self, data: list[bytes]) -> None:
        self.writes += 1
        self.out.extend(data)


def _client() -> Any:
    """A fast client that is 'connected' to a stand-in socket: a held write waits for
    the end of its read or turn (no hold cuts it short), so each read is one write."""
    from nats.aio.client import Client
    from nats.aio.subscription import Subscription

    nc: Any = new_client()
    nc._status = Client.CONNECTED
    socket = _Socket()
    nc._transport = type("Transport", (), {"_io_writer": socket})()
    nc._flusher_task = asyncio.get_running_loop().create_future()
    nc._flush_queue = asyncio.Queue()
    nc._max_payload, nc._max_pending_size, nc.hold_s = 1 << 20, 1 << 30, 3600.0
    nc.new_sub = lambda sid, subject: nc._subs.setdefault(sid, Subscription(nc, sid, subject))
    return nc, socket


async def _worker(args: argparse.Namespace, host: Host) -> Any:
    worker = Worker(host, "nats://127.0.0.1:1", name="w1", short_call_ms=60_000)
    nc, socket = _client()
    worker._nc, worker._answer_soon = nc, nc.answer_soon
    worker._loop = asyncio.get_running_loop()
    stage = worker.stages["stamp"][0]
    sub = nc.new_sub(7, stage.subject)
    endpoint = type("Endpoint", (), {"_subscription": sub, "_num_requests": 0,
                                     "_num_errors": 0})()
    worker._deliver_now(type("Service", (), {"_endpoints": [endpoint]})(), stage)
    body, deadline = _body(), str(int((time.time() + 3600) * 1000))

    def request(i: int) -> bytes:
        block = header_block({"Trace-Id": f"{i:032x}", "Tenant-Id": "default",
                              "Wasmext-Call-Id": f"{i + 7:032x}", "Wasmext-Notices": "1",
                              "Wasmext-Deadline": deadline})
        return b"HMSG %s 7 _INBOX.abcdefghijklmnopqrstuv.%d %d %d\r\n%s%s\r\n" % (
            stage.subject.encode(), i, len(block), len(block) + len(body), block, body)
    reads = [b"".join(request(r * args.per_read + j) for j in range(args.per_read))
             for r in range(64)]
    for _ in range(200):  # the plugin earns the loop (on trial), as a worker's does
        await nc._ps.parse(reads[0][:len(request(0))])
        await asyncio.sleep(0.002)
    if args.canned:
        made = encode(ExtResponse(ExtMessage("0" * 32, "chat", "stamped", {"pre": True}), {}))
        worker._timed_outcome = lambda *_a: (made, False, None, 0.0)  # type: ignore[method-assign]

    async def run(n: int) -> None:
        for r in range(max(1, n // args.per_read)):
            await nc._ps.parse(reads[r & 63])
        socket.out.clear()
    return run


async def _caller(args: argparse.Namespace, host: Host) -> Any:
    nc, socket = _client()
    loop = asyncio.get_running_loop()
    link: Any = NatsLink.__new__(NatsLink)
    link.url, link.name, link._loop, link._thread, link._client = "x", "x", loop, None, nc
    link._forked = ""
    link._replies = _Replies(nc, loop)
    nc.deliver_now(nc.new_sub(9, link._replies.prefix + "*"), link._replies._answer)
    answer = encode(ExtResponse(ExtMessage("0" * 32, "chat", "stamped", {"pre": True}), {}))
    block = header_block({"Wasmext-Worker": "w1"})
    caller = RemoteCaller(parse_registry(
        {"stamp": {"type": "pre", "subject": SUBJECT, "timeout_ms": 10_000}}), link)
    router = Router(POLICY, caller)
    session = host.session().__enter__()
    body = _body()
    headers = {"Trace-Id": "0" * 32, "Tenant-Id": "default", "Wasmext-Call-Id": "1" * 32,
               "Wasmext-Notices": "1", "Wasmext-Deadline": str(int(time.time() * 1000))}
    ext = caller.registry["stamp"]

    async def once() -> Any:
        if args.bare:
            return await link.arequest(SUBJECT, body, headers, 10.0)
        if args.acall:
            data = {"message": {"payload": "m0", "metadata": {}}, "context": {}, "config": {}}
            return await caller.acall(ext, data, CallIds("0" * 32, "default"))
        return await router.arun(session, "m0")

    async def run(n: int) -> None:
        left, done = [n], asyncio.Event()

        async def calls() -> None:
            while left[0] > 0:
                left[0] -= 1
                await once()

        async def worker() -> None:  # every request written so far, answered as one read
            while not done.is_set() or socket.out:
                await asyncio.sleep(0)
                if socket.out:
                    sent = b"".join(socket.out)
                    socket.out.clear()
                    await nc._ps.parse(b"".join(
                        b"HMSG %s 9 %d %d\r\n%s%s\r\n" % (
                            m.group(2), len(block), len(block) + len(answer), block, answer)
                        for m in _HPUB.finditer(sent)))
        answering = asyncio.ensure_future(worker())
        await asyncio.gather(*(calls() for _ in range(args.window)))
        done.set()
        await answering
    await run(500)
    if not args.bare:
        stats = caller.stats["stamp"]
        assert stats.ok == 500 and stats.failed == 0, (stats.ok, stats.failed)
    return run


async def _main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, Host(
            HostConfig(), runtime=Runtime(cache=False),
            plugin_dirs=[("workspace", _plugins(Path(tmp)))]) as host:
        tune_gc(host)  # as `wasmext worker` does
        run = await (_worker(args, host) if args.side == "worker" else _caller(args, host))
        await run(3200)  # warm
        if args.loop is not None:
            print("go", flush=True)
            sys.stdin.readline()
            await run(args.loop)
            print("done", flush=True)
            sys.stdin.readline()
            return
        per: list[float] = []
        for _ in range(args.rounds):
            started = time.thread_time()
            await run(args.n)
            per.append((time.thread_time() - started) / args.n * 1e6)
        print(f"{args.side} path, CPU us per request: min {min(per):.2f} "
              f"median {statistics.median(per):.2f}")


def main() -> None:
    """Run one side's path; print CPU per request, or run `--loop` for callgrind."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=("worker", "caller"), default="worker")
    ap.add_argument("--per-read", type=int, default=16)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--canned", action="store_true")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--bare", action="store_true")
    which.add_argument("--acall", action="store_true")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--loop", type=int, default=None)
    args = ap.parse_args()
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
