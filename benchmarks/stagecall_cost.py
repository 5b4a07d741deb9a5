"""The worker's stage call in-process: `call_stage` with its request's headers, beside
`Host.try_call` and the bare `plugin.call` of the same guest and request, in CPU time.

    python benchmarks/stagecall_cost.py [--rounds N] [--per-round N]
    python benchmarks/stagecall_cost.py --loop N [--which stage|try|bare]  # for callgrind

The guest and the request are `nats_cost.py`'s (`bench_cluster`'s `stamp` WAT plugin,
the JSON body `Router.arun` sends, the headers a `RemoteCaller` sends: trace id,
tenant, call id, calls left, deadline), with a fresh call id per request as a caller
makes. Rounds alternate the three and time each with `time.thread_time()`. `--loop N`
makes 300 warm-up calls, then N: run it under `valgrind --tool=callgrind` with N and
with 0, and the difference over N is the instructions per call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_cluster import _body, _plugins  # noqa: E402

from wasmext import Host, HostConfig  # noqa: E402
from wasmext.cluster.contract import (  # noqa: E402
    CALL_ID_HEADER,
    CALLS_LEFT_HEADER,
    DEADLINE_HEADER,
    JSON,
    TENANT_HEADER,
    TRACE_HEADER,
)
from wasmext.cluster.endpoints import Stage  # noqa: E402
from wasmext.cluster.stagecall import Budget, call_stage  # noqa: E402
from wasmext.runtime import Runtime  # noqa: E402

SUBJECT = "wasmext.ext.pre.stamp.v1"


def _calls(host: Host) -> dict[str, Callable[[int], object]]:
    """One call of each kind, given the request's number."""
    stage = Stage("stamp", "pre", SUBJECT)
    body = _body()
    data = {"message": {"message_id": "0" * 32, "message_type": "chat", "payload": "m0",
                        "metadata": {}}, "context": {}, "config": {}}
    plugin = host.plugins["stamp"].plugin
    deadline = str(int((time.time() + 3600) * 1000))
    ids = [f"{i:032x}" for i in range(64)]  # a caller's random hex ids, reused

    def stage_call(i: int) -> object:
        headers = {TRACE_HEADER: "0" * 32, TENANT_HEADER: "default",
                   CALL_ID_HEADER: ids[i & 63], CALLS_LEFT_HEADER: "999",
                   DEADLINE_HEADER: deadline}
        return call_stage(host, stage, body, JSON, Budget(headers), "bench")

    def try_call(_i: int) -> object:
        return host.try_call("stamp", "pre", data)

    def bare(_i: int) -> object:
        return plugin.call("pre", data)

    return {"stage": stage_call, "try": try_call, "bare": bare}


def main() -> None:
    """Print the per-call CPU time of the three, or run `--loop`."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--per-round", type=int, default=2000)
    ap.add_argument("--loop", type=int, default=None)
    ap.add_argument("--which", choices=("stage", "try", "bare"), default="stage")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, \
            Host(HostConfig(), runtime=Runtime(cache=False),
                 plugin_dirs=[("workspace", _plugins(Path(tmp)))]) as host:
        calls = _calls(host)
        answer = calls["stage"](0)
        assert isinstance(answer, tuple) and answer[0], answer
        if args.loop is not None:
            call = calls[args.which]
            for i in range(300):
                call(i)
            for i in range(args.loop):
                call(i)
            return
        times: dict[str, list[float]] = {name: [] for name in calls}
        for call in calls.values():
            for i in range(300):
                call(i)
        for _ in range(args.rounds):
            for name, call in calls.items():
                started = time.thread_time()
                for i in range(args.per_round):
                    call(i)
                times[name].append((time.thread_time() - started) / args.per_round * 1e6)
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:5s} min {min(values):7.2f} us  median {median:7.2f} us")


if __name__ == "__main__":
    main()
