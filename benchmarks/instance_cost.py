"""`plugin.new_instance()` beside a bare wasmtime Store + Instance, in CPU time.

    python benchmarks/instance_cost.py [--rounds N] [--per-round N] [--no-pool]
    python benchmarks/instance_cost.py --loop N [--bare]   # for callgrind

The two callables are `bench_scale`'s `scale.new_instance` and `scale.bare_instance`
rows (the same guest, the same bare module). Rounds alternate between them and
time each with `time.thread_time()`, so the other sessions sharing the machine
change both sides alike; the minimum and median per instance and their ratios are
printed. `--loop N` only makes N instances (of the plugin, or `--bare` ones) after
the set-up: run it under `valgrind --tool=callgrind` with N and with 0, and the
difference over N is the instructions per instance. `--no-pool` makes the plugin's
instances on an engine without the instance pool (`[host] instance_pool = 0`), as
every instance was made before the ninth round.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import wasmtime

from wasmext import HostConfig
from wasmext.sandbox.engine import EngineConfig
from wasmext.testing import guest_wat, make_host


def main() -> None:
    """Print the per-instance CPU time of both and their ratio, or run `--loop`."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--per-round", type=int, default=200)
    ap.add_argument("--loop", type=int, default=None)
    ap.add_argument("--bare", action="store_true")
    ap.add_argument("--no-pool", action="store_true")
    args = ap.parse_args()
    wat = guest_wat(None, response={"ok": True}, hooks=("test",))
    engine = wasmtime.Engine()
    bare_module = wasmtime.Module(engine, wasmtime.wat2wasm(wat))
    config = HostConfig(data_dir=Path(tempfile.mkdtemp(prefix="wasmext-bench-")),
                        state_backend="memory", instance_pool=0 if args.no_pool else
                        EngineConfig.instance_pool)
    host = make_host(wat, config=config)
    try:
        plugin = next(iter(host.plugins.values())).plugin

        def bare() -> None:
            wasmtime.Instance(wasmtime.Store(engine), bare_module, [])

        def fresh() -> None:
            plugin.new_instance()

        if args.loop is not None:
            make = bare if args.bare else fresh
            for _ in range(args.loop):
                make()
            return
        for _ in range(200):
            bare()
            fresh()
        times: dict[str, list[float]] = {"bare": [], "new_instance": []}
        for _ in range(args.rounds):
            for name, make in (("bare", bare), ("new_instance", fresh)):
                started = time.thread_time()
                for _ in range(args.per_round):
                    make()
                times[name].append((time.thread_time() - started) / args.per_round * 1e6)
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:14s} min {min(values):7.2f} us  median {median:7.2f} us")
        b, n = times["bare"], times["new_instance"]
        print(f"ratio          min {min(n) / min(b):.2f}x  median "
              f"{statistics.median(n) / statistics.median(b):.2f}x")
    finally:
        host.close()
        shutil.rmtree(config.data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
