"""Summarise one trace from the spans the OTLP receiver wrote, as one JSON document.

    python trace.py --spans spans.jsonl [--trace ID] [--settle 8]

It first waits until no span has arrived for `--settle` seconds (a worker's batch goes
out every 5 s), then takes the trace `--trace` names, else the one with the most spans
(the 30-round session's). It prints: the spans per service, the `wasmext.worker plugin`
spans per worker and how many have a caller's span (`wasmext-host`) as parent, the spans
whose parent never arrived (the root has none), and each remote call that took more
than one attempt with the workers whose spans hang under it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

CALLER = "wasmext-host"


def settle(path: Path, quiet_s: float, at_most_s: float = 60.0) -> None:
    """Return once `path` has not grown for `quiet_s` seconds (or after `at_most_s`)."""
    end = time.monotonic() + at_most_s
    size, since = -1, time.monotonic()
    while time.monotonic() < end:
        now = path.stat().st_size if path.exists() else 0
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.2)


def summary(spans: list[dict[str, Any]], trace_id: str | None) -> dict[str, Any]:
    """What one trace holds and how its spans link up."""
    if trace_id is None:
        trace_id = Counter(s["trace_id"] for s in spans).most_common(1)[0][0]
    mine = [s for s in spans if s["trace_id"] == trace_id]
    by_id = {s["span_id"]: s for s in mine}
    served = [s for s in mine if s["name"] == "wasmext.worker plugin"]
    under_caller = [s for s in served
                    if by_id.get(s["parent_span_id"], {}).get("service") == CALLER]
    retried = []
    for call in mine:
        attempts = call["attributes"].get("wasmext.attempts")
        if call["name"] == "wasmext.remote plugin" and attempts:
            retried.append({"plugin": call["attributes"].get("wasmext.plugin_id"),
                            "hook": call["attributes"].get("wasmext.hook"),
                            "attempts": attempts,
                            "answered_by": sorted(s["attributes"].get("wasmext.worker", "?")
                                                  for s in served
                                                  if s["parent_span_id"] == call["span_id"])})
    return {"trace_id": trace_id, "spans": len(mine),
            "services": dict(sorted(Counter(s["service"] for s in mine).items())),
            "roots": sorted(s["name"] for s in mine if not s["parent_span_id"]),
            "worker_spans": dict(sorted(Counter(s["attributes"].get("wasmext.worker", "?")
                                                for s in served).items())),
            "worker_spans_under_a_caller_span": len(under_caller),
            "missing_parent": sorted(f'{s["service"]} {s.get("instance", "")}: {s["name"]}'
                                     for s in mine
                                     if s["parent_span_id"]
                                     and s["parent_span_id"] not in by_id),
            "retried_calls": retried}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spans", type=Path, required=True)
    ap.add_argument("--trace", help="the trace id (default: the one with the most spans)")
    ap.add_argument("--settle", type=float, default=8.0,
                    help="seconds with no new span before reading (a batch goes every 5 s)")
    args = ap.parse_args()
    settle(args.spans, args.settle)
    spans = [json.loads(line) for line in args.spans.read_text().splitlines() if line]
    if not spans:
        print("no spans received", file=sys.stderr)
        return 1
    print(json.dumps(summary(spans, args.trace)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
