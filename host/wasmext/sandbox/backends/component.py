"""The component backend: plugins that are WebAssembly components of the world
`wasmext:plugin@1.0.0` (abi/wit/plugin.wit, abi/SPEC.md section 8): their
compiled code and linking. `component_instance` runs them.

This is how plugins written in Python (componentize-py) and JavaScript
(componentize-js) run. The payloads are ABI v1's MessagePack documents, so a
`ComponentPlugin` is a `Plugin`: the same registration, instance pool,
quarantine, host-call dispatch and grants; only the instance differs.

A component's exported typed functions are tools (`wit_tools`; Wassette's
model): beside the world's `register`/`call`, or instead of them.

A component is recognised by its header (layer 1 of the binary format). Its
imports are checked before anything is instantiated: the world's `host`
interface and WASI preview 2, nothing else (`UnknownImport`). Compiling a
componentized interpreter takes many seconds, so compiled code comes from the
authenticated compile cache (keyed by digest and engine configuration), and
from a small in-process table of what this process compiled or loaded.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from typing import Any

import wasmtime
from wasmtime import component as wc

from wasmext.errors import (
    AbiMismatch,
    BlockingWaitDenied,
    InvalidModule,
    ModuleTooLarge,
    UnknownImport,
)
from wasmext.sandbox import calltree
from wasmext.sandbox.backends.canon import add_bytes_import
from wasmext.sandbox.backends.wit_tools import WitFunction, typed_functions
from wasmext.sandbox.cache import CompileCache
from wasmext.sandbox.compiler import compile_component_bounded
from wasmext.sandbox.engine import SharedEngine, shared_engine
from wasmext.sandbox.module import ModuleInfo, PluginModule
from wasmext.sandbox.wasmcheck import ModuleCaps, is_component

__all__ = ["HOST_INTERFACE", "ComponentModule", "is_component"]

HOST_INTERFACE = "wasmext:plugin/host@1.0.0"
# WASI preview 2 families the linker defines; every one inherits nothing (SPEC 8).
_WASI_FAMILIES = ("wasi:io/", "wasi:clocks/", "wasi:random/", "wasi:cli/",
                  "wasi:filesystem/", "wasi:sockets/")
_MEMO_SIZE = 4


def _allowed(interface: str) -> bool:
    if interface == HOST_INTERFACE:
        return True
    return interface.startswith(_WASI_FAMILIES) and "@0.2." in interface


# -- compiled code ------------------------------------------------------------------

_memo: OrderedDict[tuple[str, str], wc.Component] = OrderedDict()
_memo_lock = threading.Lock()


def _compile(engine: SharedEngine, wasm: bytes, digest: str,
             cache: CompileCache | None, name: str, caps: ModuleCaps) -> wc.Component:
    key = (digest, engine.fingerprint)
    with _memo_lock:
        found = _memo.get(key)
        if found is not None:
            _memo.move_to_end(key)
            return found
    def compile_it() -> wc.Component:
        return compile_component_bounded(engine, wasm, caps, name)

    if cache is not None:
        component = cache.load_or_compile_component(wasm, digest, engine, name, compile_it)
    else:
        component = compile_it()
    with _memo_lock:
        _memo[key] = component
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return component


# wasmtime's validator words for what the engine leaves out (engine.SharedEngine):
# a core module of the component with a 64-bit memory, or with several memories.
_MEMORY_REFUSALS = (
    ("memory64 must be enabled", "a core module in it has a 64-bit memory (memory64); "
     "the host runs wasm32 code only"),
    ("multiple memories", "a core module in it has more than one memory; the host "
     "allows one per core module"),
)


def _memory_refusal(wasmtime_error: str) -> str:
    """The one clean line for a memory kind the engine refuses, or ''."""
    for words, why in _MEMORY_REFUSALS:
        if words in wasmtime_error:
            return why
    return ""


def forget_compiled() -> None:
    """Drop the in-process table (the next load reads the disk cache or compiles)."""
    with _memo_lock:
        _memo.clear()


# -- linking ------------------------------------------------------------------------

_linkers: dict[str, wc.Linker] = {}
_linkers_lock = threading.Lock()


def _guest() -> Any:
    """The component instance whose call is on top of this thread's call tree."""
    frame = calltree.current()
    assert frame is not None and frame.guest is not None  # wasmtime calls imports in a call
    return frame.guest


def _host_call(request: bytes | None) -> bytes:
    guest = _guest()
    on_host_call = guest.on_component_host_call
    answer: bytes = on_host_call(request)
    return answer


def _log(store: Any, level: int, message: str) -> None:
    guest = _guest()
    guest.on_component_log(level, message)


# wasmtime's WASI preview 2 waits on a clock's pollable (`subscribe-duration`, then
# `poll` or `block`) inside host code: no epoch deadline and no cancel reaches it, so a
# 4 s sleep under timeout_ms = 500 ran 4 s. wasmtime-py offers no bound: no WasiConfig
# clock option, no async calls, and replacing `wasi:io/poll` with a pollable of ours
# breaks every function of wasmtime's that returns its own (streams, sockets), since a
# shadowing definition replaces a whole interface. So the monotonic clock is the host's:
# it reads the time, and a subscription (the only way to wait on time) ends the call.
_CLOCK = "wasi:clocks/monotonic-clock@0.2."
_CLOCK_MINORS = range(32)  # every 0.2.x a component may import resolves to ours
_RESOLUTION_NS = max(1, int(time.get_clock_info("monotonic").resolution * 1e9))


def _clock_now(store: Any) -> int:
    return time.monotonic_ns()


def _clock_resolution(store: Any) -> int:
    return _RESOLUTION_NS


def _no_waiting(store: Any, when: int) -> None:
    guest = _guest()
    guest.budget.fail(BlockingWaitDenied(
        "the component asked to wait on the monotonic clock (a sleep or a timed poll); "
        "components cannot wait on time, which WASI would do beyond the call's deadline",
        plugin_id=guest.ctx.plugin_id, hook=guest.ctx.hook))


def linker_for(engine: SharedEngine) -> wc.Linker:
    """The one linker per engine: WASI preview 2 (the host's monotonic clock) and the
    world's `host` interface."""
    with _linkers_lock:
        linker = _linkers.get(engine.fingerprint)
        if linker is None:
            linker = wc.Linker(engine.engine)
            linker.add_wasip2()
            linker.allow_shadowing = True  # the clock replaces wasmtime's
            with linker.root() as root:
                for minor in _CLOCK_MINORS:
                    with root.add_instance(f"{_CLOCK}{minor}") as clock:
                        clock.add_func("now", _clock_now)
                        clock.add_func("resolution", _clock_resolution)
                        clock.add_func("subscribe-duration", _no_waiting)
                        clock.add_func("subscribe-instant", _no_waiting)
                with root.add_instance(HOST_INTERFACE) as host:
                    add_bytes_import(host, "host-call", _host_call)
                    host.add_func("log", _log)
            linker.allow_shadowing = False
            _linkers[engine.fingerprint] = linker
        return linker


class ComponentModule(PluginModule):
    """A compiled component whose imports the host offers, ready to instantiate.

    It stands where a `PluginModule` stands (`name`, `engine`, `info`), so the
    plugin layer treats both alike; the core-module fields do not apply.
    """

    def __init__(self, wasm: bytes, *, name: str = "<component>",
                 engine: SharedEngine | None = None, cache: CompileCache | None = None,
                 caps: ModuleCaps | None = None) -> None:
        self.name = name
        self.engine = (engine or shared_engine()).on_demand()
        caps = caps or ModuleCaps()
        if len(wasm) > caps.max_module_bytes:
            raise ModuleTooLarge(f"{name}: {len(wasm)} bytes, over the host's "
                                 f"max_module_bytes {caps.max_module_bytes}")
        if not is_component(wasm):
            raise InvalidModule(f"{name}: not a WebAssembly component")
        caps.check_component(wasm, name)
        digest = hashlib.sha256(wasm).hexdigest()
        try:
            self.component = _compile(self.engine, wasm, digest, cache, name, caps)
        except wasmtime.WasmtimeError as exc:
            refused = _memory_refusal(str(exc))
            if refused:
                raise AbiMismatch(f"{name}: {refused}") from exc
            raise InvalidModule(f"{name}: does not compile: {str(exc)[:500]}") from exc
        imports = tuple(self.component.type.imports(self.engine.engine))
        for interface in imports:
            if not _allowed(interface):
                raise UnknownImport(f"{name}: imports {interface[:200]}, which the world "
                                    f"wasmext:plugin@1.0.0 (and WASI preview 2) does not offer")
        exports = tuple(self.component.type.exports(self.engine.engine))
        # Typed functions it exports (beside the world's entry points, or instead of
        # them) are tools; a component with neither cannot be a plugin.
        self.world = {"register", "call"} <= set(exports)
        notes: list[str] = []
        try:
            functions = typed_functions(self.component.type, self.engine.engine, notes.append)
        except (TypeError, wasmtime.WasmtimeError) as exc:
            raise InvalidModule(f"{name}: its exports cannot be read: "
                                f"{str(exc)[:200]}") from exc
        if not self.world and not functions:
            missing = "register" if "register" not in exports else "call"
            raise AbiMismatch(f"{name}: missing export {missing!r} of the world "
                              "wasmext:plugin@1.0.0, and no exported function with "
                              "JSON-able types to offer as a tool"
                              + (f" ({notes[0]})" if notes else ""))
        self.wit_tools: tuple[WitFunction, ...] = tuple(functions)
        self.wit_notes: tuple[str, ...] = tuple(notes)
        self.info = ModuleInfo(digest, len(wasm), exports,
                               tuple((i, "*") for i in imports),
                               any(i.startswith("wasi:") for i in imports), False, False)
        self.linker = linker_for(self.engine)
