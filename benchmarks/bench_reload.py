"""What hot reload costs: a hook call while the module is being replaced and rescanned,
against the same call with no reload going on, and what one rescan costs.

    .venv/bin/python benchmarks/bench_reload.py [--quick] [--json OUT]

Rounds alternate between "steady" and "during reloads" slices (a background
thread rewrites the module and calls `host.rescan()` in a loop only during the
latter), so background load lands on both alike and the ratio compares figures
of the same run. Rescans are timed with 20 plugin folders: one with nothing
changed, and one that reloads a changed module. The exit status is 0 whatever
the numbers: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import wasmtime  # noqa: E402
from bench_timing import stats_of  # noqa: E402

from wasmext import Host, HostConfig  # noqa: E402
from wasmext.files import atomic_write  # noqa: E402
from wasmext.testing import guest_wat  # noqa: E402


def _module(version: str) -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": version})))


def _folder(parent: Path, pid: str, wasm: bytes) -> None:
    folder = parent / pid
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "0.1.0"\n')
    atomic_write(folder / f"{pid}.wasm", wasm)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rounds, calls = (3, 300) if args.quick else (10, 2000)
    versions = [_module("v1"), _module("v2")]
    with tempfile.TemporaryDirectory() as tmp:
        plugins = Path(tmp) / "plugins"
        _folder(plugins, "hot", versions[0])
        for i in range(19):
            _folder(plugins, f"other-{i}", _module(f"o{i}"))
        config = HostConfig(data_dir=Path(tmp) / "data", workspace_dir=plugins)
        with Host(config) as host:
            active = threading.Event()
            done = threading.Event()
            reloads = [0]

            def reloader() -> None:
                n = 0
                while not done.is_set():
                    if not active.wait(0.01):
                        continue
                    n += 1
                    atomic_write(plugins / "hot" / "hot.wasm", versions[n % 2])
                    reloads[0] += len(host.rescan().reloaded)

            thread = threading.Thread(target=reloader, daemon=True)
            thread.start()
            samples: dict[str, list[int]] = {"steady": [], "during_reloads": []}
            failed = 0
            for _ in range(rounds):
                for key in samples:
                    (active.set if key == "during_reloads" else active.clear)()
                    time.sleep(0.02)
                    gc.collect()
                    for _ in range(calls):
                        t0 = time.perf_counter_ns()
                        result, _err = host.try_call("hot", "test", None)
                        samples[key].append(time.perf_counter_ns() - t0)
                        failed += result is None
            active.clear()
            done.set()
            thread.join(10)
            rescans: dict[str, list[int]] = {"rescan_unchanged": [], "rescan_one_reload": []}
            for n in range(rounds * 5):
                t0 = time.perf_counter_ns()
                host.rescan()
                rescans["rescan_unchanged"].append(time.perf_counter_ns() - t0)
                atomic_write(plugins / "hot" / "hot.wasm", versions[n % 2])
                t0 = time.perf_counter_ns()
                host.rescan()
                rescans["rescan_one_reload"].append(time.perf_counter_ns() - t0)
    stats = {k: stats_of(v) for k, v in {**samples, **rescans}.items()}
    doc = {"quick": args.quick, "plugins": 20, "reloads_during_calls": reloads[0],
           "failed_calls": failed,
           "figures": {k: s.__dict__ for k, s in stats.items()},
           "ratios": {"call_p50_during_reloads_vs_steady":
                      stats["during_reloads"].p50_us / stats["steady"].p50_us,
                      "call_p99_during_reloads_vs_steady":
                      stats["during_reloads"].p99_us / stats["steady"].p99_us}}
    for key, s in stats.items():
        print(f"{key:<22} p50 {s.p50_us:>10.1f} us   p99 {s.p99_us:>10.1f} us   n {s.n}")
    print(f"reloads during calls: {reloads[0]}, failed calls: {failed}")
    for key, value in doc["ratios"].items():
        print(f"{key:<36} {value:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
