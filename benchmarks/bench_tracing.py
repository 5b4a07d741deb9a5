"""What OpenTelemetry tracing costs a hook call: off, on but not sampled, on and sampled.

    .venv/bin/python benchmarks/bench_tracing.py [--quick] [--json OUT]

One host, one trivial `on_plain_text` plugin, called through a session. Rounds
alternate the three modes (tracing is process-wide: each round installs its own, or
none), so background load lands on all alike and the ratios compare figures of one
run. Spans go to a batching processor whose exporter keeps nothing: the figure is
what making spans costs the calling thread, not what a network export costs. The
exit status is 0 whatever the numbers: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import wasmtime  # noqa: E402
from bench_timing import stats_of  # noqa: E402

from wasmext import Host, HostConfig  # noqa: E402
from wasmext.observe import tracing  # noqa: E402
from wasmext.observe.tracing import Tracing, TracingSettings  # noqa: E402
from wasmext.runtime import Runtime  # noqa: E402
from wasmext.testing import guest_wat  # noqa: E402


class _Discard:
    """A span exporter that keeps nothing (the cost measured is making spans)."""

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rounds, calls = (3, 300) if args.quick else (10, 3000)
    modes: dict[str, Tracing | None] = {
        "off": None,
        "unsampled": Tracing.with_exporter(_Discard(), TracingSettings(True, sample_ratio=0.0),
                                           batch=True),
        "sampled": Tracing.with_exporter(_Discard(), TracingSettings(True), batch=True),
    }
    wasm = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "v"},
                                             hooks=("on_plain_text",))))
    samples: dict[str, list[int]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp, \
            Host(HostConfig(data_dir=Path(tmp), state_backend="memory"),
                 runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        host.add(wasm, plugin_id="p")
        for _ in range(rounds):
            for mode, traced in modes.items():
                tracing.activate(traced)
                gc.collect()
                with host.session() as s:
                    for _ in range(calls // 10):  # warm
                        s.on_plain_text("x")
                    for _ in range(calls):
                        t0 = time.perf_counter_ns()
                        s.on_plain_text("x")
                        samples[mode].append(time.perf_counter_ns() - t0)
        tracing.activate(None)
    stats = {k: stats_of(v) for k, v in samples.items()}
    ratios = {f"{mode}_vs_off_p50": stats[mode].p50_us / stats["off"].p50_us
              for mode in ("unsampled", "sampled")}
    for key, s in stats.items():
        print(f"{key:<10} p50 {s.p50_us:>9.1f} us   p99 {s.p99_us:>9.1f} us   n {s.n}")
    for key, value in ratios.items():
        print(f"{key:<22} {value:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"quick": args.quick,
                                         "figures": {k: s.__dict__ for k, s in stats.items()},
                                         "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
