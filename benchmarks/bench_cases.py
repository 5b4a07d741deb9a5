"""The figures: each builder sets one system up, checks that it echoes, and returns Cases.

Every builder checks its answer once before anything is timed, so a figure
can never be the time it takes to fail quickly.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import wasmtime
from bench_guests import DATA, ECHO_HOOK, echo_wasm, extism_wasm
from bench_timing import Case, Skipped

from wasmext import Plugin, Runtime, WasmextError
from wasmext.files import atomic_write
from wasmext.sandbox.instance import PluginInstance

__all__ = [
    "FULL",
    "QUICK",
    "Budget",
    "Item",
    "baseline_cases",
    "extism_cases",
    "fresh_cases",
    "import_extism",
    "naive_cases",
    "replace_doc_section",
    "sdk_cases",
    "subprocess_cases",
    "wasmext_cases",
]

Item = Case | Skipped


def replace_doc_section(doc: Path, name: str, body: str) -> None:
    """Put `body` between the `<!-- NAME:begin -->` and `<!-- NAME:end -->` markers of
    `doc`, replacing what was there (or append the marked section): each benchmark owns
    its section of a generated doc, and leaves the others as they are."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    section = f"{begin}\n{body.strip()}\n{end}"
    if begin in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = head + section + tail
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + section + "\n"
    atomic_write(doc, text)


@dataclass(frozen=True)
class Budget:
    """Timed iterations (split over `rounds`) and untimed warmup calls per kind of figure."""

    rounds: int
    call: int
    fresh: int
    cat: int
    python: int
    warm_call: int
    warm_fresh: int
    warm_cat: int
    warm_python: int


FULL = Budget(rounds=10, call=100_000, fresh=10_000, cat=500, python=40,
              warm_call=3_000, warm_fresh=300, warm_cat=10, warm_python=2)
QUICK = Budget(rounds=3, call=5_000, fresh=500, cat=30, python=3,
               warm_call=300, warm_fresh=30, warm_cat=3, warm_python=1)

# wasmext encodes maps with use_bin_type=True; so does every driver here.
_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def _check(label: str, got: Any, want: Any = DATA) -> None:
    if got != want:
        raise RuntimeError(f"{label}: answered {got!r}, expected {want!r}")


def _identity(value: Any) -> Any:
    return value


# -- wasmext ----------------------------------------------------------------------------


def wasmext_cases(rt: Runtime, b: Budget) -> list[Item]:
    """Plugin.call (the public path), PluginInstance.call, and the bound export alone."""
    plugin = rt.load(echo_wasm(), plugin_id="bench-echo")
    _check("Plugin.call", plugin.call(ECHO_HOOK, DATA).value)
    inst = plugin._borrow()  # our own instances, out of the plugin's pool
    raw = plugin._borrow()
    _check("PluginInstance.call", inst.call(ECHO_HOOK, DATA).value)
    _check("PluginInstance.call (raw)", raw.call(ECHO_HOOK, DATA).value)
    # `raw` now holds the request in its input region: time the bound export alone.
    n = len(_pack({"hook": ECHO_HOOK, "data": DATA}))
    ptr, bound = raw._in_ptr, raw._call
    answer = bound(ptr, n)
    out = raw.memory.read(answer >> 32, answer & 0xFFFFFFFF)
    _check("bound wasmext_call", msgpack.unpackb(out)["value"] if out else None)

    def unlimited_deadline() -> None:
        # PluginInstance.call refreshes fuel and deadline on every call; the bare
        # export does not, so give it a budget that cannot run out during a round.
        raw._set_budget(raw.limits.fuel_per_call, 1 << 40)

    return [
        Case("wasmext.plugin_call", "wasmext Plugin.call (msgpack in+out)", "hook call",
             lambda: plugin.call(ECHO_HOOK, DATA), b.call, b.warm_call),
        Case("wasmext.instance_call", "wasmext PluginInstance.call", "hook call",
             lambda: inst.call(ECHO_HOOK, DATA), b.call, b.warm_call),
        Case("wasmext.bound_call", "wasmext bound wasmext_call alone (fastcall)", "hook call",
             lambda: bound(ptr, n), b.call, b.warm_call, before_round=unlimited_deadline,
             note="no msgpack, no budget refresh: the ctypes floor of the hot path"),
    ]


def fresh_cases(rt: Runtime, b: Budget) -> list[Item]:
    """A fresh PluginInstance (no WASI and WASI) and a fresh registered one."""
    items: list[Item] = []
    for wasi in (False, True):
        tag = "wasi" if wasi else "plain"
        plugin = rt.load(echo_wasm(wasi=wasi), plugin_id=f"bench-echo-{tag}")
        if plugin.module.info.uses_wasi != wasi:
            raise RuntimeError(f"echo module ({tag}): uses_wasi is {plugin.module.info.uses_wasi}")
        module, limits, services = plugin.module, plugin.limits, plugin.services

        def fresh(module: Any = module, limits: Any = limits, services: Any = services,
                  plugin: Any = plugin) -> PluginInstance:
            return PluginInstance(module, limits, plugin._context(), services)

        fresh_inst = fresh()
        fresh_inst.start(plugin.register_request())
        _check(f"fresh PluginInstance ({tag})", fresh_inst.call(ECHO_HOOK, DATA).value)
        what = "WASI module" if wasi else "no WASI"
        items.append(Case(f"fresh.wasmext_instance.{tag}", f"wasmext PluginInstance(...), {what}",
                          "fresh instance", fresh, b.fresh, b.warm_fresh))
        items.append(Case(f"fresh.wasmext_registered.{tag}",
                          f"wasmext plugin.new_instance() (+register), {what}",
                          "fresh instance", plugin.new_instance, b.fresh, b.warm_fresh))
    return items


# -- naive wasmtime-py ----------------------------------------------------------------


def naive_cases(b: Budget) -> list[Item]:
    """The same guest driven with wasmtime-py's public API only, the obvious way."""
    engine = wasmtime.Engine()  # default config: no fuel, no epochs
    module = wasmtime.Module(engine, echo_wasm())
    wasi_module = wasmtime.Module(engine, echo_wasm(wasi=True))
    store = wasmtime.Store(engine)
    exports = wasmtime.Instance(store, module, []).exports(store)
    memory, alloc, call = exports["memory"], exports["wasmext_alloc"], exports["wasmext_call"]
    assert isinstance(memory, wasmtime.Memory)
    assert isinstance(alloc, wasmtime.Func) and isinstance(call, wasmtime.Func)

    def full_call() -> Any:
        req = msgpack.packb({"hook": ECHO_HOOK, "data": DATA}, use_bin_type=True)
        ptr = alloc(store, len(req))
        memory.write(store, req, ptr)
        res = call(store, ptr, len(req)) & 0xFFFF_FFFF_FFFF_FFFF
        out_ptr, out_len = res >> 32, res & 0xFFFF_FFFF
        return msgpack.unpackb(memory.read(store, out_ptr, out_ptr + out_len))["value"]

    _check("naive wasmtime-py call", full_call())
    req = msgpack.packb({"hook": ECHO_HOOK, "data": DATA}, use_bin_type=True)
    req_ptr = alloc(store, len(req))
    memory.write(store, req, req_ptr)
    req_len = len(req)

    linker = wasmtime.Linker(engine)
    linker.define_wasi()

    def bare_instance() -> wasmtime.Instance:
        return wasmtime.Instance(wasmtime.Store(engine), module, [])

    def bare_wasi_instance() -> wasmtime.Instance:
        s = wasmtime.Store(engine)
        s.set_wasi(wasmtime.WasiConfig())
        return linker.instantiate(s, wasi_module)

    bare_wasi_instance()
    return [
        Case("naive.full_call", "naive wasmtime-py: alloc+write+call+read, msgpack",
             "hook call", full_call, b.call, b.warm_call,
             note="Func.__call__ for wasmext_alloc and wasmext_call, Memory.write/read"),
        Case("naive.func_call", "naive wasmtime-py: Func.__call__(wasmext_call) alone",
             "hook call", lambda: call(store, req_ptr, req_len), b.call, b.warm_call),
        Case("fresh.naive_instance.plain", "bare wasmtime-py Store + Instance, no WASI",
             "fresh instance", bare_instance, b.fresh, b.warm_fresh),
        Case("fresh.naive_instance.wasi", "bare wasmtime-py Store + WasiConfig + Linker, WASI",
             "fresh instance", bare_wasi_instance, b.fresh, b.warm_fresh),
    ]


# -- Extism -----------------------------------------------------------------------------


def import_extism(extra_paths: list[str]) -> tuple[Any, str]:
    """The extism module, or None and the reason it is not importable."""
    try:
        return importlib.import_module("extism"), ""
    except ImportError as first:
        reason = f"{first}; pip install 'extism>=1.1,<2' or pass --extism-path"
    for path in extra_paths:
        if path and path not in sys.path:
            sys.path.append(path)  # after our own packages: never shadows them
    if not extra_paths:
        return None, reason
    try:
        return importlib.import_module("extism"), ""
    except ImportError as exc:
        return None, f"{exc}, not even with {os.pathsep.join(extra_paths)} on sys.path"


def extism_cases(b: Budget, extra_paths: list[str]) -> list[Item]:
    group = "hook call"
    extism, reason = import_extism(extra_paths)
    if extism is None:
        return [Skipped("extism.echo_call", "extism Plugin.call echo", group, reason)]
    try:
        wasm = extism_wasm()
        plugin = extism.Plugin(wasm, wasi=False)

        def echo() -> Any:
            return msgpack.unpackb(plugin.call("echo", _pack(DATA)))

        _check("extism echo", echo())
        _check("extism empty", bytes(plugin.call("empty", b"")), b"")
    except Exception as exc:  # the SDK's own errors have no common base worth naming
        return [Skipped("extism.echo_call", "extism Plugin.call echo", group,
                        f"{type(exc).__name__}: {exc}")]
    items: list[Item] = [
        Case("extism.echo_call", "extism Plugin.call echo (msgpack in+out)", group,
             echo, b.call, b.warm_call),
        Case("extism.empty_call", "extism Plugin.call empty (no input, no output)", group,
             lambda: plugin.call("empty", b""), b.call, b.warm_call),
    ]
    compiled_cls = getattr(getattr(extism, "extism", None), "CompiledPlugin", None)
    for wasi in (False, True):
        tag = "wasi" if wasi else "plain"
        label = f"extism Plugin(CompiledPlugin), wasi={wasi}"
        if compiled_cls is None:
            items.append(Skipped(f"fresh.extism.{tag}", label, "fresh instance",
                                 "this extism has no CompiledPlugin"))
            continue
        compiled = compiled_cls(wasm, wasi=wasi)

        def fresh(compiled: Any = compiled) -> Any:
            return extism.Plugin(compiled)

        _check("extism fresh", msgpack.unpackb(fresh().call("echo", _pack(DATA))))
        items.append(Case(f"fresh.extism.{tag}", label, "fresh instance", fresh, b.fresh,
                          b.warm_fresh))
    return items


# -- the old model and the floor --------------------------------------------------------

_PY_ECHO = "import json, sys; json.dump(json.load(sys.stdin), sys.stdout)"


def subprocess_cases(b: Budget) -> list[Item]:
    """A hook as a child process: JSON on stdin, JSON back on stdout."""
    items: list[Item] = []
    python = os.path.realpath(sys.executable)  # the interpreter itself, not a venv or shim
    commands: list[tuple[str, str, list[str | None], int, int]] = [
        ("subprocess.cat", "subprocess `cat`, JSON over stdin", [shutil.which("cat")],
         b.cat, b.warm_cat),
        ("subprocess.python", "subprocess `python3 -c` JSON echo script",
         [python, "-c", _PY_ECHO], b.python, b.warm_python),
    ]
    for key, label, cmd, iters, warm in commands:
        if cmd[0] is None:
            items.append(Skipped(key, label, "subprocess", "not on PATH"))
            continue
        argv = [str(c) for c in cmd]

        def hook(argv: list[str] = argv) -> Any:
            proc = subprocess.run(argv, input=json.dumps(DATA).encode(), capture_output=True,
                                  check=True)
            return json.loads(proc.stdout)

        _check(label, hook())
        items.append(Case(key, label, "subprocess", hook, iters, warm,
                          note=" ".join(a if len(a) < 40 else a[:37] + "..." for a in argv)))
    return items


def baseline_cases(b: Budget) -> list[Item]:
    def json_trip() -> Any:
        return json.loads(json.dumps(_identity(DATA)))

    def msgpack_trip() -> Any:
        return msgpack.unpackb(_pack(_identity(DATA)))

    _check("json round trip", json_trip())
    _check("msgpack round trip", msgpack_trip())
    return [
        Case("python.msgpack", "plain Python function, msgpack round trip", "in-process",
             msgpack_trip, b.call, b.warm_call),
        Case("python.json", "plain Python function, json round trip", "in-process",
             json_trip, b.call, b.warm_call),
        Case("timer.floor", "timer + empty Python call (measurement floor)", "in-process",
             lambda: None, b.call, b.warm_call),
    ]


# -- guest SDK conformance plugins ------------------------------------------------------


# plugin id -> {"lang", "size"} of each SDK's conformance plugin, for the docs table.
SDK_INFO: dict[str, dict[str, Any]] = {}


def _sdk_folders(root: Path) -> list[Path]:
    found = [*root.glob("guest-sdks/*/conformance/plugin.toml"),
             *root.glob("plugins/*/plugin.toml")]
    return sorted(p.parent for p in found)


def sdk_cases(rt: Runtime, root: Path, b: Budget, *, build: bool,
              notes: list[str]) -> list[Item]:
    """`echo` through every built plugin that registers it (the SDK conformance plugins)."""
    items: list[Item] = []
    tmp: Path | None = None
    for folder in _sdk_folders(root):
        rel = folder.relative_to(root)
        try:
            try:
                plugin = rt.load(folder)
            except WasmextError as exc:
                if not build or "not built" not in str(exc):
                    raise
                if tmp is None:
                    tmp = Path(tempfile.mkdtemp(prefix="wasmext-bench-"))
                plugin = _build_and_load(rt, folder, tmp)
        except Exception as exc:
            reason = str(exc).splitlines()[0]
            notes.append(f"{rel}: skipped ({reason})")
            continue
        if ECHO_HOOK not in plugin.registration.hook_names:
            notes.append(f"{rel}: skipped (registers no '{ECHO_HOOK}' hook)")
            continue
        _check(f"{plugin.id} echo", plugin.call(ECHO_HOOK, DATA).value)
        items.append(Case(f"sdk.{plugin.id}.echo", f"{plugin.id}: Plugin.call echo (SDK codec)",
                          "guest SDK", _echo_call(plugin), b.call, b.warm_call, note=str(rel)))
        if rel.parts[0] == "guest-sdks":
            SDK_INFO[plugin.id] = {"lang": rel.parts[1], "size": plugin.module.info.size}
            items.append(Case(f"sdk.{plugin.id}.instance",
                              f"{plugin.id}: new instance, registered", "guest SDK",
                              plugin.new_instance, b.fresh // 4, b.warm_fresh // 4,
                              note=str(rel)))
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return items


def _echo_call(plugin: Plugin) -> Callable[[], Any]:
    return lambda: plugin.call(ECHO_HOOK, DATA)


def _build_and_load(rt: Runtime, folder: Path, out_dir: Path) -> Plugin:
    from wasmext.manifest import load_manifest
    from wasmext_cli.build import build_plugin

    manifest = load_manifest(folder / "plugin.toml")
    result = build_plugin(folder, out_dir=out_dir / manifest.id)
    return rt.load(result.wasm, plugin_id=manifest.id)
