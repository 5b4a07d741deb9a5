"""Where one hook call spends its time: PluginInstance.call taken apart, stage by stage.

    python benchmarks/profile_call.py [--iters N] [--cprofile] [--session]

Each stage of `PluginInstance.call` (and of the fastcall binding under it) is
replayed on a live instance of the echo guest in a loop of its own, and its
per-call p50 is printed beside the p50 of the whole call. The stages are the
host's own code paths called the way `call` calls them, so the sum is close
to, but not exactly, the whole (the whole also pays for its own bytecode
between stages). `--cprofile` adds a cProfile listing of the same calls
(cProfile's overhead inflates the many small functions; use it for the shape,
the stage table for the numbers). Read-only: nothing in the host is changed.

`--session` does the same one layer up: `Session.on_plain_text` through a
Host with one no-op plugin, taken apart into what the host adds around
`Plugin.call` (ordering, metrics, trace, the transform result); then the
same hook awaited through `host.asession()`, inline and in a worker thread,
beside what the event loop and a thread hop cost on their own.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_guests import DATA, ECHO_HOOK, echo_wasm  # noqa: E402
from bench_timing import Case, run_interleaved, stats_of  # noqa: E402

from wasmext import Runtime  # noqa: E402
from wasmext.sandbox.codec import check_depth  # noqa: E402
from wasmext.sandbox.instance import CallResult, PluginInstance  # noqa: E402


def _raw_call(inst: PluginInstance, ptr: int, n: int) -> Callable[[], int]:
    """wasmtime_func_call_unchecked through a prototype of our own: the ctypes floor."""
    from wasmtime import _ffi as ffi

    vp = ctypes.c_void_p
    call = ctypes.CFUNCTYPE(vp, vp, vp, vp, ctypes.c_size_t, vp)(
        ("wasmtime_func_call_unchecked", ffi.dll))
    ctx = ctypes.cast(inst.store._context(), vp).value
    fn = ctypes.addressof(inst._exports["wasmext_call"])
    args = (ffi.wasmtime_val_raw_t * 2)()
    pargs = ctypes.addressof(args)
    trap = ctypes.c_void_p()
    ptrap = ctypes.addressof(trap)

    def raw() -> int:
        args[0].i32 = ptr
        args[1].i32 = n
        if call(ctx, fn, pargs, 2, ptrap) or trap.value:
            raise RuntimeError("raw call failed")
        return int(args[0].i64)

    raw()
    return raw


def stages(plugin: Any, inst: PluginInstance) -> tuple[list[tuple[str, Callable[[], Any]]],
                                                       list[str]]:
    """(name, one call of the stage) in the order PluginInstance.call runs them.

    The host changes under this script: a stage whose internals are gone is
    skipped (and named in the second list) rather than failing the run.
    """
    req = {"hook": ECHO_HOOK, "data": DATA}
    payload = inst._pack(req)
    ptr, n = inst._in_ptr, len(payload)
    packed = inst._call(ptr, n)
    raw = inst._read_output(packed, "wasmext_call")
    assert raw is not None
    resp = inst._decode(raw, "call response")
    out_ptr, out_len = packed >> 32, packed & 0xFFFFFFFF

    def enter_leave() -> None:
        inst.budget.enter()
        inst.budget.leave()

    def budget() -> Callable[[], Any]:
        fuel, ticks, set_budget = inst.limits.fuel_per_call, inst._ticks, inst._set_budget
        return lambda: set_budget(fuel, ticks)

    builders: list[tuple[str, Callable[[], Callable[[], Any]]]] = [
        ("Plugin.call (whole public path)", lambda: lambda: plugin.call(ECHO_HOOK, DATA)),
        ("PluginInstance.call (whole)", lambda: lambda: inst.call(ECHO_HOOK, DATA)),
        ("  build request dict", lambda: lambda: {"hook": ECHO_HOOK, "data": DATA}),
        ("  msgpack pack(request)", lambda: lambda: inst._pack(req)),
        ("  memory.write_unchecked(request)",
         lambda: lambda: inst.memory.write_unchecked(ptr, payload)),
        ("  _set_budget(fuel, ticks)", budget),
        ("  CallBudget.enter + leave (call-tree frame)", lambda: enter_leave),
        ("  bound wasmext_call (fastcall)", lambda: lambda: inst._call(ptr, n)),
        ("    raw ctypes call, own prototype", lambda: _raw_call(inst, ptr, n)),
        ("  _read_output (bounds check + copy)",
         lambda: lambda: inst._read_output(packed, "wasmext_call")),
        ("    memory.size() alone", lambda: inst.memory.size),
        ("    memory.read() alone", lambda: lambda: inst.memory.read(out_ptr, out_len)),
        ("  _decode (codec.decode)", lambda: lambda: inst._decode(raw, "call response")),
        ("    msgpack.unpackb alone", lambda: lambda: msgpack.unpackb(raw)),
        ("    codec.check_depth alone", lambda: lambda: check_depth(resp, 64)),
        ("  _response -> CallResult", lambda: lambda: inst._response(resp, DATA)),
        ("    CallResult(...) alone", lambda: lambda: CallResult(DATA, True, False, {})),
    ]
    result: list[tuple[str, Callable[[], Any]]] = []
    skipped: list[str] = []
    for name, build in builders:
        try:
            fn = build()
            fn()
        except Exception as exc:
            skipped.append(f"{name.strip()}: {type(exc).__name__}: {exc}")
            continue
        result.append((name, fn))
    return result, skipped


def session_stages() -> tuple[list[tuple[str, Callable[[], Any]]], Callable[[], None]]:
    """The host layer around Plugin.call, stage by stage, on a Host with one no-op plugin;
    then the same hook awaited, and what an await costs without any hook."""
    import asyncio

    from wasmext.aio import worst_case_ms
    from wasmext.callpool import call_pool
    from wasmext.hooks.ordering import Entry
    from wasmext.hooks.transform import TransformResult
    from wasmext.session import Trace
    from wasmext.testing import guest_wat, make_host

    host = make_host((guest_wat(hooks=("on_plain_text",), response={"ok": True}),
                      {"plugin_id": "noop"}))
    session = host.session().__enter__()
    plugin = host.plugins["noop"].plugin
    meta = {"session": session.id}
    entry = host.ordered("on_plain_text")[0]
    metrics = host.observe.metrics
    trace = Trace(limit=1 << 62)  # its own: the session's stops taking notes at its limit
    assert session.on_plain_text("hi").value == "hi" and isinstance(entry, Entry)
    loop = asyncio.new_event_loop()
    sessions, exits = [], []
    for inline_below_ms in (0, worst_case_ms(host, "on_plain_text") + 1):  # thread, inline
        cm = host.asession(inline_below_ms=inline_below_ms)
        sessions.append(loop.run_until_complete(cm.__aenter__()))
        exits.append(cm)
    hop, inline = sessions

    def close() -> None:
        for cm in exits:
            loop.run_until_complete(cm.__aexit__(None, None, None))
        loop.close()
        host.close()

    async def nothing() -> None:
        return None

    named: list[tuple[str, Callable[[], Any]]] = [
        ("Session.on_plain_text (whole)", lambda: session.on_plain_text("hi")),
        ("  host.call(entry) (policy, timing, metrics, trace)",
         lambda: host.call(entry, "hi", session)),
        ("    Plugin.call (the sandbox)", lambda: plugin.call("on_plain_text", "hi", meta)),
        ("    metrics.record_callback", lambda: metrics.record_callback(
            "noop", "on_plain_text", "ok", 1e-5, 100)),
        ("    trace.add", lambda: trace.add(entry, "unchanged", None)),
        ("  host.ordered(hook)", lambda: host.ordered("on_plain_text")),
        ("  TransformResult(...)", lambda: TransformResult("hi", "hi")),
        ("awaited, inline (run_until_complete of it)",
         lambda: loop.run_until_complete(inline.on_plain_text("hi"))),
        ("  run_until_complete of a no-op coroutine", lambda: loop.run_until_complete(nothing())),
        ("  worst_case_ms(hook) (the inline check)",
         lambda: worst_case_ms(host, "on_plain_text")),
        ("awaited, in a worker thread (run_until_complete of it)",
         lambda: loop.run_until_complete(hop.on_plain_text("hi"))),
        ("  call pool hop of a no-op", lambda: loop.run_until_complete(
            _in_loop(lambda: call_pool().submit(loop, _nothing)))),
        ("  asyncio.to_thread of a no-op", lambda: loop.run_until_complete(
            asyncio.to_thread(_nothing))),
    ]
    session.trace.limit = 0  # the stages above would otherwise fill the trace
    for s in sessions:
        s.trace.limit = 0
    return named, close


def _nothing() -> None:
    return None


async def _in_loop(make: Callable[[], Any]) -> Any:
    return await make()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=50_000, help="timed calls per stage")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cprofile", action="store_true", help="also print a cProfile listing")
    ap.add_argument("--session", action="store_true",
                    help="profile the host layer (Session.on_plain_text) instead")
    args = ap.parse_args(argv)
    if args.session:
        return profile_session(args)
    with Runtime(cache=False) as rt:
        plugin = rt.load(echo_wasm(), plugin_id="bench-echo")
        inst = plugin._borrow()
        assert inst.call(ECHO_HOOK, DATA).value == DATA
        named, skipped = stages(plugin, inst)

        def refresh() -> None:
            inst._set_budget(inst.limits.fuel_per_call, 1 << 40)  # the bare stages never do

        cases = [Case(f"stage{i}", name, "stage", fn, args.iters, min(2_000, args.iters),
                      before_round=refresh) for i, (name, fn) in enumerate(named)]
        run_interleaved(cases, args.rounds, verbose=False)
        whole = stats_of(next(c for c in cases if "(whole)" in c.label).samples).p50_us
        width = max(len(c.label) for c in cases) + 2
        print(f"{'stage':<{width}}{'p50 us':>9}{'p99 us':>9}{'% of call':>11}")
        for c in cases:
            s = stats_of(c.samples)
            print(f"{c.label:<{width}}{s.p50_us:>9.2f}{s.p99_us:>9.2f}"
                  f"{100 * s.p50_us / whole:>10.0f}%")
        for line in skipped:
            print(f"skipped: {line}")
        if args.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.iters):
                inst.call(ECHO_HOOK, DATA)
            prof.disable()
            print()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


def profile_session(args: argparse.Namespace) -> int:
    named, close = session_stages()
    try:
        cases = [Case(f"stage{i}", name, "stage", fn, args.iters, min(2_000, args.iters))
                 for i, (name, fn) in enumerate(named)]
        run_interleaved(cases, args.rounds, verbose=False)
        whole = stats_of(cases[0].samples).p50_us
        width = max(len(c.label) for c in cases) + 2
        print(f"{'stage':<{width}}{'p50 us':>9}{'p99 us':>9}{'% of call':>11}")
        for c in cases:
            s = stats_of(c.samples)
            print(f"{c.label:<{width}}{s.p50_us:>9.2f}{s.p99_us:>9.2f}"
                  f"{100 * s.p50_us / whole:>10.0f}%")
        if args.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.iters):
                named[0][1]()
            prof.disable()
            print()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    finally:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
