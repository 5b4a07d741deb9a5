"""CPU per request on each side of a NATS round trip: `Router.arun` beside a bare
nats-py echo, same server, same request body, same asyncio caller, interleaved.

    python benchmarks/nats_cost.py [--rounds N] [--n N] [--in-flight N] [--inline | --lane]

Each round runs `n` requests of each kind one at a time, then `n` with `in_flight`
outstanding, alternating the echo and the `Router.arun` stage, and reads the CPU time
each process spent meanwhile: the caller's own (`time.process_time`, every thread) and
the responder's (the echo process, or the `wasmext worker`: the sum of
`/proc/PID/task/*/schedstat`, nanoseconds), and nats-server's. With `in_flight`
outstanding it also prints the share of a core each side kept busy: two sides that take
turns add up to about one core, two that work at once to more. CPU time per request
hardly depends on what else the machine runs; the wall-clock ratios printed beside it
do, which is why rounds alternate and the minimum and median over rounds are shown.
`--inline` starts the worker with `--inline-below-ms 5000` (the stage runs on the
worker's loop by rule);
`--lane` with `--short-call-ms 0` (every call through the lane, as a plugin with the
ABI's default `timeout_ms` went until the sixth round); by default the worker's own
rule holds (the plugin's calls go through the lane until 8 in a row were short, then
run on the loop on trial: the warm-up gets it there).

`--loop N` only runs N `Router.arun`s one at a time (`--loop-window W`: W in flight)
(or, with `--echo`, N echo requests) after 100 warm-up ones, printing the responder's
pid first (with `--caller`, its own: run it under `valgrind --tool=callgrind
--instr-atstart=no`): for callgrind, switch instrumentation on when it has printed the
pid (`callgrind_control -i on PID`), then send a line; off when it prints `done`, then send another.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_cluster import ECHO_SUBJECT, POLICY, Cluster, _body, _pct  # noqa: E402

from wasmext import Host, HostConfig  # noqa: E402
from wasmext.cluster.link import NatsLink  # noqa: E402
from wasmext.cluster.registry import parse_registry  # noqa: E402
from wasmext.cluster.remote import RemoteCaller  # noqa: E402
from wasmext.cluster.routing import Router  # noqa: E402
from wasmext.runtime import Runtime  # noqa: E402

SUBJECT = "wasmext.ext.pre.stamp.v1"


def cpu_ns(pid: int) -> int:
    """CPU time every thread of process `pid` has used so far, in nanoseconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that just ended
            continue
    return total


def waits(pid: int) -> int:
    """Times every thread of process `pid` has blocked so far (voluntary context
    switches: a sleep in epoll, a wait for the GIL or a lock, each a wake-up later)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


async def _batch(once: Any, n: int, in_flight: int) -> tuple[list[float], float]:
    """Latency samples (us) of `n` calls one at a time, or (in_flight > 1) none and the
    calls per second with `in_flight` outstanding."""
    if in_flight <= 1:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            await once()
            samples.append((time.perf_counter() - started) * 1e6)
        return samples, 0.0
    left = n

    async def loop() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await once()
    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(in_flight)))
    return [], n / (time.perf_counter() - started)


async def _measure(cluster: Cluster, host: Host, args: argparse.Namespace) -> dict[str, Any]:
    link = await NatsLink.open(cluster.url)
    echo_pid, worker_pid = cluster.procs[1].pid, cluster.workers[0].pid
    server_pid = cluster.procs[0].pid
    router = Router(POLICY, RemoteCaller(parse_registry(
        {"stamp": {"type": "pre", "subject": SUBJECT, "timeout_ms": 10_000}}), link))
    print(f"pids: caller {os.getpid()} echo {echo_pid} worker {worker_pid}", flush=True)
    body = _body()
    scope = host.session()
    session = scope.__enter__()
    try:
        async def echo() -> None:
            await link.client.request(ECHO_SUBJECT, body, timeout=5)

        async def arun() -> None:
            await router.arun(session, "m0")

        kinds = {"echo": (echo, echo_pid), "arun": (arun, worker_pid)}
        if args.loop is not None:
            once = echo if args.echo else arun
            for _ in range(100):
                await once()
            print(os.getpid() if args.caller else echo_pid if args.echo else worker_pid,
                  flush=True)
            sys.stdin.readline()  # instrumentation switched on
            await _batch(once, args.loop, args.loop_window)
            print("done", flush=True)
            sys.stdin.readline()  # and off
            return {}
        for once, _pid in kinds.values():  # warm up both
            await _batch(once, args.n // 4, 1)
            await _batch(once, args.n // 4, args.in_flight)
        rows: dict[str, dict[str, list[float]]] = {
            k: {"caller_us": [], "responder_us": [], "caller_tp_us": [],
                "responder_tp_us": [], "p50_us": [], "per_s": [], "caller_waits": [],
                "caller_tp_waits": [], "responder_waits": [], "responder_tp_waits": [],
                "caller_busy": [], "responder_busy": [], "server_tp_us": []}
            for k in kinds}
        for _ in range(args.rounds):
            for name, (once, pid) in kinds.items():
                row = rows[name]
                for window in (1, args.in_flight):
                    me = os.getpid()
                    mine, theirs = time.process_time_ns(), cpu_ns(pid)
                    server = cpu_ns(server_pid)
                    my_waits, their_waits = waits(me), waits(pid)
                    samples, rate = await _batch(once, args.n, window)
                    mine, theirs = time.process_time_ns() - mine, cpu_ns(pid) - theirs
                    server = cpu_ns(server_pid) - server
                    tail = "" if window == 1 else "tp_"
                    row[f"caller_{tail}waits"].append((waits(me) - my_waits) / args.n)
                    row[f"responder_{tail}waits"].append((waits(pid) - their_waits) / args.n)
                    row[f"caller_{tail}us"].append(mine / args.n / 1e3)
                    row[f"responder_{tail}us"].append(theirs / args.n / 1e3)
                    if window == 1:
                        row["p50_us"].append(_pct(samples, 0.5))
                    else:
                        row["per_s"].append(rate)
                        # the share of a core each side kept busy: near 1 in all, the
                        # two took turns; near 1 each, they worked at once
                        row["caller_busy"].append(mine * rate / args.n / 1e9)
                        row["responder_busy"].append(theirs * rate / args.n / 1e9)
                        row["server_tp_us"].append(server / args.n / 1e3)
        out: dict[str, Any] = {}
        for name, row in rows.items():
            out[name] = {k: {"min": round(min(v), 2), "median": round(statistics.median(v), 2)}
                         for k, v in row.items()}
        e, a = rows["echo"], rows["arun"]
        out["ratios"] = {
            "p50": _spread([x / y for x, y in zip(a["p50_us"], e["p50_us"], strict=True)]),
            "throughput": _spread([x / y for x, y in zip(a["per_s"], e["per_s"], strict=True)]),
            "cpu_one_at_a_time": _spread([
                (ac + ar) / (ec + er) for ac, ar, ec, er in
                zip(a["caller_us"], a["responder_us"], e["caller_us"], e["responder_us"],
                    strict=True)]),
            "cpu_in_flight": _spread([
                (ac + ar) / (ec + er) for ac, ar, ec, er in
                zip(a["caller_tp_us"], a["responder_tp_us"], e["caller_tp_us"],
                    e["responder_tp_us"], strict=True)])}
        return out
    finally:
        scope.__exit__(None, None, None)
        await link.aclose()


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2),
            "max": round(max(values), 2)}


def main() -> None:
    """Start a server, the echo and one worker; print CPU per request and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--in-flight", type=int, default=16)
    place = ap.add_mutually_exclusive_group()
    place.add_argument("--inline", action="store_true")
    place.add_argument("--lane", action="store_true")
    ap.add_argument("--loop", type=int, default=None)
    ap.add_argument("--echo", action="store_true")
    ap.add_argument("--loop-window", type=int, default=1,
                    help="with --loop: how many requests are in flight (default 1)")
    ap.add_argument("--caller", action="store_true",
                    help="with --loop: print this process's pid, not the responder's")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            cluster.add_echo()
            cluster.add_worker(*(("--inline-below-ms", "5000") if args.inline else
                                 ("--short-call-ms", "0") if args.lane else ()))
            with Host(HostConfig(), runtime=Runtime(cache=False),
                      plugin_dirs=[("workspace", cluster.plugins)]) as host:
                out = asyncio.run(_measure(cluster, host, args))
        finally:
            cluster.close()
    if args.loop is not None:
        return
    where = ("on its loop" if args.inline else "through the lane" if args.lane else
             "on its loop on trial (the default)")
    print(f"{args.rounds} rounds x {args.n} requests, one at a time and "
          f"{args.in_flight} in flight; worker stage {where}")
    print("CPU us per request      caller (1 / window)     responder (1 / window)"
          "      p50 us     per s")
    for name in ("echo", "arun"):
        r = out[name]
        print(f"  {name:6} min     {r['caller_us']['min']:>8} {r['caller_tp_us']['min']:>8}"
              f"     {r['responder_us']['min']:>8} {r['responder_tp_us']['min']:>8}"
              f"     {r['p50_us']['min']:>8} {r['per_s']['min']:>9}")
        print(f"  {name:6} median  {r['caller_us']['median']:>8} "
              f"{r['caller_tp_us']['median']:>8}     {r['responder_us']['median']:>8} "
              f"{r['responder_tp_us']['median']:>8}     {r['p50_us']['median']:>8} "
              f"{r['per_s']['median']:>9}")
    print("wake-ups per request    caller (1 / window)     responder (1 / window)")
    for name in ("echo", "arun"):
        r = out[name]
        print(f"  {name:6} median  {r['caller_waits']['median']:>8} "
              f"{r['caller_tp_waits']['median']:>8}     {r['responder_waits']['median']:>8} "
              f"{r['responder_tp_waits']['median']:>8}")
    print(f"at {args.in_flight} in flight    share of a core busy: caller / responder"
          "     nats-server CPU us per request")
    for name in ("echo", "arun"):
        r = out[name]
        print(f"  {name:6} median  {r['caller_busy']['median']:>8} "
              f"{r['responder_busy']['median']:>8}     {r['server_tp_us']['median']:>8}")
    for key, v in out["ratios"].items():
        print(f"  arun/echo {key:18} min {v['min']}  median {v['median']}  max {v['max']}")


if __name__ == "__main__":
    main()
