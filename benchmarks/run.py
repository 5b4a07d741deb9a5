"""wasmext benchmarks: one hook call and one fresh instance, against the baselines, in one run.

    python benchmarks/run.py [--quick] [--json PATH] [--extism-path DIR] [--build-sdk]

Prints a table, the ratios and the DESIGN.md targets with pass/fail marks,
then the whole result as JSON (also written to benchmarks/results/latest.json).
See benchmarks/README.md for what each figure means and the caveats.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:  # the helper modules beside this file
    sys.path.insert(0, str(HERE))

import msgpack  # noqa: E402
from bench_cases import (  # noqa: E402
    FULL,
    QUICK,
    Item,
    baseline_cases,
    extism_cases,
    fresh_cases,
    naive_cases,
    sdk_cases,
    subprocess_cases,
    wasmext_cases,
)
from bench_costs import cost_cases, cost_report  # noqa: E402
from bench_guests import DATA  # noqa: E402
from bench_scale import redis_cases, scale_cases  # noqa: E402
from bench_state import state_cases  # noqa: E402
from bench_timing import Case, Skipped, Stats, run_interleaved, stats_of  # noqa: E402

from wasmext import Runtime  # noqa: E402
from wasmext.sandbox.fastcall import FAST_PATH  # noqa: E402

RESULTS = HERE / "results" / "latest.json"
GROUPS = ["hook call", "guest SDK", "in-process", "subprocess", "fresh instance", "state",
          "where users pay", "at scale"]
CLEANUP: list[Any] = []  # servers and hosts the state figures started
HEADLINE = "wasmext.plugin_call"
FRESH = "fresh.wasmext_instance.wasi"


@dataclass(frozen=True)
class Ratio:
    key: str
    baseline: str
    subject: str
    label: str
    at_least: float | None = None  # a DESIGN.md target on the ratio


@dataclass(frozen=True)
class Target:
    key: str
    label: str
    subject: str
    max_p50_us: float


RATIOS = [
    Ratio("vs_naive_wasmtime", "naive.full_call", HEADLINE, "hook call vs naive wasmtime-py"),
    Ratio("vs_naive_func_call", "naive.func_call", HEADLINE,
          "hook call vs naive Func.__call__ alone"),
    Ratio("vs_extism_echo", "extism.echo_call", HEADLINE, "hook call vs extism echo (msgpack)"),
    Ratio("vs_extism_empty", "extism.empty_call", HEADLINE, "hook call vs extism empty call"),
    Ratio("vs_subprocess_cat", "subprocess.cat", HEADLINE, "hook call vs subprocess cat",
          at_least=150.0),
    Ratio("vs_subprocess_python", "subprocess.python", HEADLINE,
          "hook call vs subprocess python3"),
    Ratio("state_sqlite_get", "state.sqlite.noop", "state.sqlite.get",
          "state.get (SQLite) vs a hook call without state"),
    Ratio("state_sqlite_set", "state.sqlite.noop", "state.sqlite.set",
          "state.set (SQLite, committed) vs a hook call without state"),
    Ratio("state_redis_get", "state.redis.noop", "state.redis.get",
          "state.get (Redis) vs a hook call without state"),
    Ratio("state_redis_set", "state.redis.noop", "state.redis.set",
          "state.set (Redis, committed) vs a hook call without state"),
    Ratio("state_jetstream_get", "state.jetstream.noop", "state.jetstream.get",
          "state.get (JetStream) vs a hook call without state"),
    Ratio("state_jetstream_set", "state.jetstream.noop", "state.jetstream.set",
          "state.set (JetStream, committed) vs a hook call without state"),
    Ratio("jetstream_vs_redis_get", "state.redis.get", "state.jetstream.get",
          "state.get hook call: JetStream vs Redis"),
    Ratio("jetstream_vs_redis_set", "state.redis.set", "state.jetstream.set",
          "state.set hook call: JetStream vs Redis"),
    Ratio("jetstream_set_vs_batch", "state.jetstream.batch2", "state.jetstream.set",
          "JetStream state.set hook call vs its atomic batch floor"),
    Ratio("jetstream_batch_vs_put", "state.jetstream.kv_put", "state.jetstream.batch2",
          "JetStream atomic batch of two vs one plain KV put"),
    Ratio("jetstream_set_full_scope", "state.jetstream.set", "state.jetstream.set_full",
          "JetStream state.set: into a 1000-key session vs a 1-key one"),
    Ratio("redis_set_full_scope", "state.redis.set", "state.redis.set_full",
          "Redis state.set: into a 1000-key session vs a 1-key one"),
    Ratio("vs_plain_python_msgpack", "python.msgpack", HEADLINE,
          "hook call vs plain Python msgpack round trip"),
    Ratio("fresh_vs_naive_wasi", "fresh.naive_instance.wasi", FRESH,
          "fresh instance (WASI) vs bare wasmtime-py (WASI)"),
    Ratio("fresh_vs_naive_plain", "fresh.naive_instance.plain", "fresh.wasmext_instance.plain",
          "fresh instance (no WASI) vs bare wasmtime-py"),
    Ratio("fresh_vs_extism_wasi", "fresh.extism.wasi", FRESH,
          "fresh instance (WASI) vs extism (wasi=True)"),
    Ratio("fresh_vs_extism_plain", "fresh.extism.plain", "fresh.wasmext_instance.plain",
          "fresh instance (no WASI) vs extism (wasi=False)"),
]

TARGETS = [
    Target("hook_call_p50", "one hook call, msgpack in and out (Plugin.call)", HEADLINE, 8.0),
    Target("fresh_instance_p50", "fresh instance ready to call, WASI module", FRESH, 30.0),
    Target("fresh_instance_plain_p50", "fresh instance ready to call, no WASI",
           "fresh.wasmext_instance.plain", 30.0),
]


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    extism_kernel = None
    ext = sys.modules.get("extism")
    if ext is not None:
        try:
            extism_kernel = ext.extism_version()
        except Exception:
            extism_kernel = "?"
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wasmext": _version("wasmext"),
        "wasmtime": _version("wasmtime"),
        "msgpack": _version("msgpack"),
        "extism": _version("extism"),
        "extism_kernel": extism_kernel,
        "extism_from": getattr(ext, "__file__", None),
        "fastcall": FAST_PATH,
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        # Uncommitted changes to the host: the figures measure the working tree.
        "host_changes": (_git("status", "--porcelain", "--", "host") or "").splitlines(),
    }


def collect(args: argparse.Namespace, rt: Runtime, notes: list[str]) -> list[Item]:
    b = QUICK if args.quick else FULL
    extra = [p for p in (args.extism_path or "").split(os.pathsep) if p]
    items: list[Item] = []
    if args.costs_only:  # only the issue-14 figures and their floors
        return cost_cases(rt, b, CLEANUP)
    if args.redis_only:  # only the Redis state.set figure and its floor
        return redis_cases(b, CLEANUP)
    if args.scale_only:  # only the issue-25 figures and their floors
        return scale_cases(b, CLEANUP, million=args.scale_1m)
    if args.state_only:  # only the state backends (SQLite, Redis, JetStream)
        return state_cases(b, CLEANUP)
    items += wasmext_cases(rt, b)
    items += naive_cases(b)
    items += extism_cases(b, extra)
    items += sdk_cases(rt, ROOT, b, build=args.build_sdk, notes=notes)
    items += baseline_cases(b)
    items += subprocess_cases(b)
    items += fresh_cases(rt, b)
    items += state_cases(b, CLEANUP)
    items += cost_cases(rt, b, CLEANUP)
    # The many-plugins rows compile 100 modules here and 200 in a child process:
    # tens of seconds on a loaded machine, left out of a quick full run
    # (`--scale-only --quick` keeps them).
    items += scale_cases(b, CLEANUP, million=args.scale_1m, many=not args.quick)
    fresh_order = ["fresh.wasmext_instance.plain", "fresh.wasmext_registered.plain",
                   "fresh.wasmext_instance.wasi", "fresh.wasmext_registered.wasi",
                   "fresh.naive_instance.plain", "fresh.naive_instance.wasi",
                   "fresh.extism.plain", "fresh.extism.wasi"]

    def order(item: Item) -> tuple[int, int]:
        g = GROUPS.index(item.group) if item.group in GROUPS else len(GROUPS)
        k = fresh_order.index(item.key) if item.key in fresh_order else 0
        return g, k

    return sorted(items, key=order)  # stable: builder order within a group


# -- reporting ------------------------------------------------------------------------


def write_sdk_table(stats: dict[str, Stats], quick: bool) -> None:
    """docs/sdk-figures.md's first section: size, instantiate time and per-call time per
    language (the other sections belong to other benchmarks)."""
    from bench_cases import SDK_INFO, replace_doc_section

    base = stats.get(HEADLINE)
    lines = [
        "Generated by `python benchmarks/run.py --build-sdk --write-docs` "
        f"({dt.date.today().isoformat()}{', quick run' if quick else ''}); do not edit.",
        "Each SDK's conformance plugin: module size, a new registered instance",
        "(Store, limits, imports, `_initialize`, `wasmext_register`), and one `echo`",
        "hook call of a ~100-byte map through `Plugin.call`. Times are p50 on this",
        "project's 2-core machines; the last column compares with the no-op WAT guest",
        "measured in the same run.",
        "",
        "| language | plugin | size (bytes) | new instance (µs) | echo call (µs) "
        "| vs no-op guest |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for pid, info in sorted(SDK_INFO.items(), key=lambda kv: kv[1]["lang"]):
        inst, echo = stats.get(f"sdk.{pid}.instance"), stats.get(f"sdk.{pid}.echo")
        if inst is None or echo is None:
            continue
        ratio = f"{echo.p50_us / base.p50_us:.2f}x" if base else "-"
        lines.append(f"| {info['lang']} | {pid} | {info['size']:,} | {inst.p50_us:,.1f} | "
                     f"{echo.p50_us:.2f} | {ratio} |")
    replace_doc_section(ROOT / "docs" / "sdk-figures.md", "sdk", "\n".join(lines))



def _fmt(us: float) -> str:
    return f"{us:.2f}" if us < 100 else f"{us:.1f}" if us < 10_000 else f"{us:.0f}"


def _times(x: float) -> str:
    if x >= 1:
        return f"{x:,.1f}x faster" if x < 100 else f"{x:,.0f}x faster"
    return f"{1 / x:,.1f}x slower"


def table(items: list[Item], stats: dict[str, Stats]) -> str:
    width = max(len(i.label) for i in items) + 2
    lines = [f"{'figure':<{width}}{'n':>8}{'p50 us':>11}{'p99 us':>11}{'min us':>11}"]
    current = ""
    for item in items:
        if item.group != current:
            current = item.group
            lines.append(f"-- {current} " + "-" * (width + 38 - len(current)))
        if isinstance(item, Skipped):
            name = item.key.split(".")[0]
            lines.append(f"{item.label:<{width}}{name}: unavailable ({item.reason})")
            continue
        s = stats[item.key]
        lines.append(f"{item.label:<{width}}{s.n:>8}{_fmt(s.p50_us):>11}{_fmt(s.p99_us):>11}"
                     f"{_fmt(s.min_us):>11}")
    return "\n".join(lines)


def ratios(stats: dict[str, Stats]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in RATIOS:
        if r.baseline not in stats or r.subject not in stats:
            out[r.key] = {"label": r.label, "baseline": r.baseline, "subject": r.subject,
                          "value": None, "reason": "a figure is unavailable"}
            continue
        value = stats[r.baseline].p50_us / stats[r.subject].p50_us
        # four significant digits: a ratio far below 1 must not round to 0
        entry: dict[str, Any] = {"label": r.label, "baseline": r.baseline, "subject": r.subject,
                                 "value": float(f"{value:.4g}"),
                                 "meaning": "baseline p50 / subject p50"}
        if r.at_least is not None:
            entry["target_at_least"] = r.at_least
            entry["pass"] = value >= r.at_least
        out[r.key] = entry
    return out


def targets(stats: dict[str, Stats], rat: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for t in TARGETS:
        s = stats.get(t.subject)
        out[t.key] = {"label": t.label, "subject": t.subject, "max_p50_us": t.max_p50_us,
                      "p50_us": round(s.p50_us, 3) if s else None,
                      "pass": (s.p50_us <= t.max_p50_us) if s else None}
    for key, r in rat.items():
        if "target_at_least" in r:
            out[key] = {"label": r["label"], "subject": r["subject"],
                        "at_least": r["target_at_least"], "ratio": r["value"],
                        "pass": r.get("pass")}
    return out


def _mark(ok: bool | None) -> str:
    return "n/a " if ok is None else "PASS" if ok else "FAIL"


def report(items: list[Item], stats: dict[str, Stats], rat: dict[str, dict[str, Any]],
           tg: dict[str, dict[str, Any]], notes: list[str]) -> str:
    lines = [table(items, stats), "", "ratios (p50 against p50, same run):"]
    for r in rat.values():
        text = "unavailable" if r["value"] is None else _times(r["value"])
        goal = f"   (target >= {r['target_at_least']:.0f}x)" if "target_at_least" in r else ""
        lines.append(f"  {r['label']:<50} {text}{goal}")
    lines += ["", "targets (DESIGN.md, Performance targets):"]
    for t in tg.values():
        if "max_p50_us" in t:
            got = "unavailable" if t["p50_us"] is None else f"p50 {_fmt(t['p50_us'])} us"
            lines.append(f"  [{_mark(t['pass'])}] {t['label']:<48} <= {t['max_p50_us']:.0f} us:"
                         f" {got}")
        else:
            got = "unavailable" if t["ratio"] is None else f"{t['ratio']:,.0f}x"
            lines.append(f"  [{_mark(t['pass'])}] {t['label']:<48} >= {t['at_least']:.0f}x:"
                         f" {got}")
    if notes:
        lines += ["", "notes:", *(f"  - {n}" for n in notes)]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    """Replace `path` in one step, so that a reader never sees half a document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def cluster_acceptance(doc: dict[str, Any]) -> dict[str, Any]:
    """Issue 29's figures from one run: a remote hook call against a local one, and the
    JetStream state backend against Redis (p50 in microseconds, ratios subject/baseline)."""
    results, cluster = doc["results"], doc["cluster"]
    out: dict[str, Any] = {}
    if "hook_remote" in cluster:
        out["hook_local_p50_us"] = cluster["hook_local"]["p50_us"]
        out["hook_remote_p50_us"] = cluster["hook_remote"]["p50_us"]
        out["hook_remote_vs_local"] = cluster["hook_remote_vs_local_p50"]
    for op in ("get", "set"):
        redis, jetstream = results[f"state.redis.{op}"], results[f"state.jetstream.{op}"]
        out[f"redis_{op}_p50_us"] = redis["p50_us"]
        out[f"jetstream_{op}_p50_us"] = jetstream["p50_us"]
        out[f"jetstream_vs_redis_{op}"] = round(jetstream["p50_us"] / redis["p50_us"], 2)
    return out


def acceptance_report(figures: dict[str, Any]) -> str:
    """The issue-29 figures as lines."""
    lines = ["cluster (issue 29), one run               p50 us          ratio"]
    if "hook_remote_vs_local" in figures:
        lines.append(f"  hook call local / remote       {figures['hook_local_p50_us']:>10.1f} / "
                     f"{figures['hook_remote_p50_us']:<10.1f} remote "
                     f"{figures['hook_remote_vs_local']}x")
    for op in ("get", "set"):
        lines.append(f"  state.{op} Redis / JetStream    {figures[f'redis_{op}_p50_us']:>10.1f} / "
                     f"{figures[f'jetstream_{op}_p50_us']:<10.1f} JetStream "
                     f"{figures[f'jetstream_vs_redis_{op}']}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short run (well under a minute)")
    ap.add_argument("--json", metavar="PATH", type=Path, help="also write the JSON here")
    ap.add_argument("--extism-path", metavar="DIRS",
                    default=os.environ.get("WASMEXT_BENCH_EXTISM_PATH", ""),
                    help="site-packages folder(s) to find extism in when this interpreter "
                         "lacks it (appended to sys.path; env WASMEXT_BENCH_EXTISM_PATH)")
    ap.add_argument("--write-docs", action="store_true",
                    help="write the per-language table to docs/sdk-figures.md")
    ap.add_argument("--costs-only", action="store_true",
                    help="time only the 'where users pay' figures and their floors")
    ap.add_argument("--scale-only", action="store_true",
                    help="time only the issue-25 figures (world ops, state at size, host"
                         " calls, new instances) and their floors")
    ap.add_argument("--redis-only", action="store_true",
                    help="time only a committed Redis state.set against a plain SET")
    ap.add_argument("--scale-1m", action="store_true",
                    help="also time a SQLite set with 1M keys in its plugin (slow to fill)")
    ap.add_argument("--state-only", action="store_true",
                    help="time only the state backends' get/set figures (SQLite, Redis,"
                         " JetStream) in one run")
    ap.add_argument("--build-sdk", action="store_true",
                    help="build conformance plugins that are not built yet (into a temp dir)")
    ap.add_argument("--cluster", action="store_true",
                    help="also time remote stages over NATS and 1/2/4 workers (bench_cluster)")
    ap.add_argument("--async-scale", action="store_true",
                    help="also time the worst event-loop gap of 1,000 async sessions (bench_async)")
    ap.add_argument("--flood", action="store_true",
                    help="also time a 40 MB log flood against writing the cap (bench_flood)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    env_before = [round(x, 2) for x in os.getloadavg()]
    notes: list[str] = []
    b = QUICK if args.quick else FULL
    with Runtime(cache=False) as rt:
        items = collect(args, rt, notes)
        cases = [i for i in items if isinstance(i, Case)]
        print(f"timing {len(cases)} figures in {b.rounds} interleaved rounds"
              f"{' (quick)' if args.quick else ''}...", file=sys.stderr, flush=True)
        try:
            run_interleaved(cases, b.rounds)
        finally:
            for stop in reversed(CLEANUP):
                stop()
        stats = {c.key: stats_of(c.samples) for c in cases}
    if args.write_docs:
        write_sdk_table(stats, quick=args.quick)
    rat = ratios(stats)
    tg = targets(stats, rat)
    cost_lines, costs = cost_report(stats)
    env = environment()
    env["loadavg_before"] = env_before
    doc: dict[str, Any] = {
        "schema": 1,
        "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "seconds": round(time.perf_counter() - started, 1),
        "rounds": b.rounds,
        "payload": {"value": DATA, "msgpack_bytes": len(msgpack.packb(DATA)),
                    "json_bytes": len(json.dumps(DATA))},
        "environment": env,
        "results": {},
        "ratios": rat,
        "targets": tg,
        "costs": costs,
        "notes": notes,
    }
    for item in items:
        if isinstance(item, Skipped):
            doc["results"][item.key] = {"label": item.label, "group": item.group,
                                        "unavailable": item.reason}
        else:
            entry: dict[str, Any] = {"label": item.label, "group": item.group,
                                     **stats[item.key].as_dict()}
            if item.note:
                entry["note"] = item.note
            doc["results"][item.key] = entry
    sections: list[str] = []
    for wanted, name in ((args.cluster, "cluster"), (args.async_scale, "async"),
                         (args.flood, "flood")):
        if wanted:
            module = importlib.import_module(f"bench_{name}")
            # The loop gap follows the heap a full collection scans: timed in a fresh
            # interpreter, as an application embedding wasmext would run it.
            doc[name] = (module.in_a_fresh_interpreter(args.quick) if name == "async"
                         else module.measure(args.quick))
            sections.append(module.report(doc[name]))
    if args.cluster and "state.jetstream.set" in stats and "state.redis.set" in stats:
        doc["cluster_acceptance"] = cluster_acceptance(doc)
        sections.append(acceptance_report(doc["cluster_acceptance"]))
    text = json.dumps(doc, indent=2)
    print(report(items, stats, rat, tg, notes))
    print("\n".join(cost_lines))
    for section in sections:
        print(f"\n{section}")
    print()
    print(text)
    written = [RESULTS]
    if args.json is not None and args.json.resolve() != RESULTS:
        written.append(args.json)
    for path in written:
        _write(path, text + "\n")
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
