"""Component plugins (Python, JavaScript) against the native C plugin, in one run.

    python benchmarks/bench_components.py [--rounds N] [--write-docs]

For each language's conformance plugin: its size, the first compile (empty
compile cache), a cached load (the authenticated disk cache, as a new process
sees it), a new registered instance, and one `echo` call of the ~100-byte map
(p50, rounds interleaved as in run.py). For the components it then splits one
call into its parts, to show where the time goes:

* `export`: the bare export call with the request already encoded (the guest,
  plus the canonical ABI's copies): what no host change can remove;
* the host's share is `echo - export`: encoding, decoding, budgets, pooling.

A plugin that asks for JSON payloads (the JavaScript SDK: abi/SPEC.md 8.1) is also
timed with them turned off in the host (`echo, MessagePack`), in the same rounds, so
the two transports compare without the machine's load between them.

Each language's resident memory per extra instance is measured in a fresh
interpreter (compiled code comes from the cache the first load filled, and is
shared by every instance: the growth is the instance's own memory).

`--write-docs` replaces the components section of docs/sdk-figures.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import msgpack  # noqa: E402
from bench_cases import replace_doc_section  # noqa: E402
from bench_guests import DATA  # noqa: E402
from bench_rss import PLUGIN_ARGS, run_rss_script  # noqa: E402
from bench_timing import Case, run_interleaved, stats_of  # noqa: E402

from wasmext import CompileCache, Runtime  # noqa: E402
from wasmext.sandbox.backends.component import forget_compiled  # noqa: E402
from wasmext.sandbox.jsonwire import json_request  # noqa: E402

DOCS = ROOT / "docs" / "sdk-figures.md"
PLUGINS = {
    "c": ROOT / "guest-sdks" / "c" / "conformance",
    "python": ROOT / "guest-sdks" / "python" / "conformance",
    "javascript": ROOT / "guest-sdks" / "javascript" / "conformance",
}


def _build(folder: Path) -> Path | None:
    from wasmext_cli.build import BuildError, build_plugin

    try:
        return build_plugin(folder).wasm
    except BuildError as exc:
        print(f"skipped {folder.name}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return None


def _load_time(folder: Path, cache_dir: Path) -> tuple[float, Any]:
    forget_compiled()
    cache = CompileCache(cache_dir / "modules", cache_dir / "key")
    rt = Runtime(cache=cache)
    started = time.perf_counter()
    plugin = rt.load(folder)
    return time.perf_counter() - started, (rt, plugin)


_RSS_SCRIPT = PLUGIN_ARGS + """
with Runtime(cache=CompileCache(cache / "modules", cache / "key")) as rt:
    plugin = rt.load(folder)
    plugin.call("echo", "warm up")
    before = rss()
    instances = [plugin.new_instance() for _ in range(n)]
    print(json.dumps({"instance": (rss() - before) / n, "process": rss()}))
"""
RSS_INSTANCES = 8


def rss_per_instance(folder: Path, cache_dir: Path) -> dict[str, float] | None:
    """Resident bytes per extra instance (and the process's total after them), in a
    fresh interpreter; None where /proc/self/statm does not exist."""
    return run_rss_script(_RSS_SCRIPT, [str(folder), str(cache_dir), str(RSS_INSTANCES)],
                          ROOT)


def measure(rounds: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cases: list[Case] = []
    keep: list[Any] = []
    for lang, folder in PLUGINS.items():
        if not (folder / "plugin.toml").is_file():
            continue
        wasm = _build(folder)
        if wasm is None:
            continue
        cache_dir = Path(tempfile.mkdtemp(prefix=f"bench-{lang}-"))
        first, _ = _load_time(folder, cache_dir)
        cached, (rt, plugin) = _load_time(folder, cache_dir)
        keep.append(rt)
        row: dict[str, Any] = {"language": lang, "plugin": plugin.id, "size": wasm.stat().st_size,
                               "first_compile_s": first, "cached_load_s": cached}
        rows.append(row)
        rss = rss_per_instance(folder, cache_dir)
        if rss is not None:
            row["instance_rss"] = rss["instance"]
        assert plugin.call("echo", DATA).value == DATA
        cases.append(Case(f"{lang}.echo", f"{lang} echo", "echo",
                          lambda p=plugin: p.call("echo", DATA), 200, 20))
        cases.append(Case(f"{lang}.instance", f"{lang} new instance", "instance",
                          plugin.new_instance, 5 if lang != "c" else 50, 1))
        if "json" in plugin.registration.codecs:
            # The same module with JSON payloads turned off in the host: its pooled
            # instance (one caller, so always the same one) is told the guest did not ask.
            plain = rt.load(folder, plugin_id=f"{lang}-msgpack")
            for idle in plain._idle:
                idle.json = False  # type: ignore[attr-defined]
            assert plain.call("echo", DATA).value == DATA
            cases.append(Case(f"{lang}.echo_msgpack", f"{lang} echo, MessagePack", "echo",
                              lambda p=plain: p.call("echo", DATA), 200, 20))
        inst = plugin.new_instance()
        keep.append(inst)
        if hasattr(inst, "_call_export"):
            req = {"hook": "echo", "data": DATA}
            payload = (json_request(req, 64, 1 << 20) if getattr(inst, "json", False)
                       else None) or msgpack.packb(req)
            export = inst._call_export

            def bare(e: Any = export, i: Any = inst, payload: bytes = payload) -> Any:
                # No deadline: outside a plugin call the epoch watchdog would stop it.
                i._set_budget(i.limits.fuel_per_call, 1 << 40)
                return e(payload, 1 << 20)
            cases.append(Case(f"{lang}.export", f"{lang} bare export", "parts", bare, 200, 20))
    run_interleaved(cases, rounds, verbose=False)
    by_key = {c.key: stats_of(c.samples).p50_us for c in cases}  # µs
    for row in rows:
        lang = row["language"]
        row["instance_us"] = by_key[f"{lang}.instance"]
        row["echo_us"] = by_key[f"{lang}.echo"]
        if f"{lang}.export" in by_key:
            row["export_us"] = by_key[f"{lang}.export"]
        if f"{lang}.echo_msgpack" in by_key:
            row["echo_msgpack_us"] = by_key[f"{lang}.echo_msgpack"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    base = next((r["echo_us"] for r in rows if r["language"] == "c"), None)
    lines = [
        "| language | size (bytes) | first compile (s) | cached load (s) | new instance (µs) "
        "| RSS per instance (MiB) | echo call (µs) | vs C | bare export (µs) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = f"{r['echo_us'] / base:.1f}x" if base else "-"
        export = f"{r['export_us']:.0f}" if "export_us" in r else "-"
        lines.append(f"| {r['language']} | {r['size']:,} | {r['first_compile_s']:.1f} | "
                     f"{r['cached_load_s']:.2f} | {r['instance_us']:,.0f} | "
                     f"{r['instance_rss'] / 2**20 if 'instance_rss' in r else 0:.2f} | "
                     f"{r['echo_us']:.1f} | {ratio} | {export} |")
    for r in rows:
        if "echo_msgpack_us" in r and base:
            lines.append(f"\n{r['language']} echo with MessagePack payloads (JSON turned off "
                         f"in the host, same rounds): {r['echo_msgpack_us']:.1f} µs, "
                         f"{r['echo_msgpack_us'] / base:.1f}x C.")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    replace_doc_section(DOCS, "components", (
        f"## Component plugins\n\nGenerated by `python benchmarks/"
        f"bench_components.py --write-docs` ({dt.date.today()}); do not edit.\n"
        "Conformance plugins, the native C one as the baseline of the same run. "
        "`bare export` is the guest's own share of an echo call (request already "
        "encoded); the rest of `echo call` is the host's. `RSS per instance`: resident "
        "memory per extra instance of a loaded plugin (the compiled code is shared).\n\n"
        + text))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    rows = measure(args.rounds)
    text = table(rows)
    print(text)
    if args.write_docs:
        write_docs(text)


if __name__ == "__main__":
    main()
