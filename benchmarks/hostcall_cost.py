"""One hook call with one `host_call` (config.get), with one `log`, and with none, in CPU time.

    python benchmarks/hostcall_cost.py [--rounds N] [--per-round N]
    python benchmarks/hostcall_cost.py --loop N --which none|log|get   # for callgrind

The three plugins are `bench_scale`'s `scale.hook_none`, `scale.hook_log` and
`scale.hook_config_get` rows (the same guests). Rounds alternate between them and time
each with `time.thread_time()`, so the other sessions sharing the machine change all
three alike; the minimum and median per call and the ratios are printed. `--loop N`
only makes N calls of one plugin after the set-up: run it under `valgrind
--tool=callgrind` with N and with 0, and the difference over N is the instructions
per call.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_guests import host_call_guests

from wasmext.testing import make_host


def main() -> None:
    """Print the per-call CPU time of the three and their ratios, or run `--loop`."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--per-round", type=int, default=2000)
    ap.add_argument("--loop", type=int, default=None)
    ap.add_argument("--which", choices=("none", "log", "get"), default="get")
    args = ap.parse_args()
    wats = host_call_guests()
    host = make_host((wats["none"], {"plugin_id": "none"}), (wats["log"], {"plugin_id": "log"}),
                     (wats["get"], {"plugin_id": "get", "settings": {"greeting": "hi"}}))
    try:
        plugins = {name: host.plugins[name].plugin for name in wats}
        for plugin in plugins.values():
            for _ in range(200):
                plugin.call("test")
        if args.loop is not None:
            call = plugins[args.which].call
            for _ in range(args.loop):
                call("test")
            return
        times: dict[str, list[float]] = {name: [] for name in plugins}
        for _ in range(args.rounds):
            for name, plugin in plugins.items():
                call = plugin.call
                started = time.thread_time()
                for _ in range(args.per_round):
                    call("test")
                times[name].append((time.thread_time() - started) / args.per_round * 1e6)
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:5s} min {min(values):7.2f} us  median {median:7.2f} us")
        for a, b in (("get", "none"), ("get", "log"), ("log", "none")):
            print(f"{a}/{b:5s} min {min(times[a]) / min(times[b]):.2f}x  median "
                  f"{statistics.median(times[a]) / statistics.median(times[b]):.2f}x")
    finally:
        host.close()


if __name__ == "__main__":
    main()
