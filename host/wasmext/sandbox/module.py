"""A plugin's compiled code: checked against ABI v1 once, instantiated many times.

Loading refuses, before any guest code runs, a module that imports anything
outside the ABI (no stub is ever linked that would trap later), lacks a
required export, or exports one with another signature.

Identical modules share one compiled module: loads of the same bytes on the
same engine (same engine config) through the same compile cache (one Runtime
or Host has one) or with none find the code, its ABI check and its pre-linked
template by SHA-256 digest, and only the per-load checks (the runtime's module
caps) run again. The entry lives as long as a plugin uses it.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wasmtime

from wasmext._abi import EXPORTS, IMPORTS
from wasmext.errors import AbiMismatch, InvalidModule, ModuleTooLarge, UnknownImport, UnsafeFile
from wasmext.files import read_regular
from wasmext.sandbox import hostlink, wasi
from wasmext.sandbox.cache import CompileCache
from wasmext.sandbox.compiler import compile_bounded
from wasmext.sandbox.engine import SharedEngine, shared_engine
from wasmext.sandbox.fastcall import handle
from wasmext.sandbox.limits import WASM_PAGE
from wasmext.sandbox.wasmcheck import ModuleCaps, ModuleShape, check_memories, inspect

__all__ = ["WASI_MODULE", "PluginModule"]

WASI_MODULE = "wasi_snapshot_preview1"
_VALTYPES = {"i32": wasmtime.ValType.i32(), "i64": wasmtime.ValType.i64()}


def _sig(ty: wasmtime.FuncType) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(str(p) for p in ty.params), tuple(str(r) for r in ty.results)


@dataclass(frozen=True)
class ModuleInfo:
    """What the loader learnt of a module: digest, size, imports, exports."""

    digest: str
    size: int
    exports: tuple[str, ...]
    imports: tuple[tuple[str, str], ...]
    uses_wasi: bool
    has_free: bool
    has_initialize: bool
    table_minimums: tuple[int, ...] = ()
    # Instantiating runs guest code (a start function). Unknown: assume it does.
    has_start: bool = True
    memory_bytes: int = 0  # the exported memory's initial size (its declared minimum)


class _Compiled:
    """What identical modules share: the code, its shape, its ABI facts, the template."""

    __slots__ = ("__weakref__", "info", "module", "pre", "pre_handle", "registrations",
                 "shape")

    def __init__(self, module: wasmtime.Module, shape: ModuleShape, info: ModuleInfo,
                 pre: wasmtime.InstancePre) -> None:
        self.module, self.shape, self.info, self.pre = module, shape, info, pre
        # The template's address, for the raw instantiate entry (fastcall): read once.
        self.pre_handle = handle(ctypes.addressof(pre.ptr().contents))
        # Registration maps the guest declared shareable, by what they may depend on
        # (sandbox.plugin): copies of this code reuse them instead of registering at load.
        self.registrations: dict[str, dict[str, Any]] = {}


_Tables = weakref.WeakKeyDictionary[SharedEngine, weakref.WeakValueDictionary[str, Any]]
_uncached: _Tables = weakref.WeakKeyDictionary()  # loads without a compile cache
_shared_lock = threading.Lock()


def _tables(cache: CompileCache | None) -> _Tables:
    return _uncached if cache is None else cache.in_memory


def _lookup(engine: SharedEngine, digest: str, cache: CompileCache | None = None
            ) -> _Compiled | None:
    with _shared_lock:
        table = _tables(cache).get(engine)
        return None if table is None else table.get(digest)


def _keep(engine: SharedEngine, digest: str, compiled: _Compiled,
          cache: CompileCache | None) -> _Compiled:
    """Share `compiled`, or the entry another thread stored first."""
    with _shared_lock:
        table = _tables(cache).setdefault(engine, weakref.WeakValueDictionary())
        kept: _Compiled = table.setdefault(digest, compiled)
        return kept


class PluginModule:
    """Compiled, ABI-checked code plus the pre-linked instance template."""

    def __init__(self, wasm: bytes, *, name: str = "<module>", engine: SharedEngine | None = None,
                 cache: CompileCache | None = None, caps: ModuleCaps | None = None) -> None:
        self.name = name
        self.engine = engine or shared_engine()
        if not wasm.startswith(b"\0asm"):
            raise InvalidModule(f"{name}: not a WebAssembly binary (bad magic)")
        digest = hashlib.sha256(wasm).hexdigest()
        caps = caps or ModuleCaps()
        shared = _lookup(self.engine, digest, cache)
        if shared is None:
            shared = self._compile(wasm, digest, cache, caps)
        else:
            caps.check(shared.shape, name)  # this runtime's caps, on the shape already read
        self._shared = shared  # keeps the shared entry alive while this module is
        self.module, self.info, self.pre = shared.module, shared.info, shared.pre
        self.pre_handle = shared.pre_handle
        self.registrations = shared.registrations
        # The latest registration map an instance of this load answered, with its bytes
        # (`PluginInstance.start` reuses the decoded map for the same bytes; never mutated).
        self.last_registration: tuple[bytes, dict[str, Any]] | None = None
        # The guest's `wasmext_abi_version` answered ABI_MAJOR in an instance of this
        # load: later instances are not asked again (SPEC 3: checked once per loaded
        # module). A reload is a new PluginModule, asked again.
        self.abi_checked = False

    def _compile(self, wasm: bytes, digest: str, cache: CompileCache | None,
                 caps: ModuleCaps) -> _Compiled:
        name = self.name
        try:
            shape = inspect(wasm)
        except InvalidModule as exc:
            raise InvalidModule(f"{name}: malformed: {exc}") from exc
        caps.check(shape, name)  # before compiling: compiling is what the caps bound
        check_memories(shape, name)
        self.engine.check_tables(shape.table_minimums, name)
        def compile_it() -> wasmtime.Module:
            return compile_bounded(self.engine, wasm, shape, caps, name)

        try:
            if cache is not None:
                module = cache.load_or_compile(wasm, digest, self.engine, name, compile_it)
            else:
                module = compile_it()
        except wasmtime.WasmtimeError as exc:
            raise InvalidModule(f"{name}: does not compile: {exc}") from exc
        info = self._check(module, digest, len(wasm), shape.table_minimums, shape.has_start)
        pre = hostlink.linker_for(self.engine).instantiate_pre(module)
        return _keep(self.engine, digest, _Compiled(module, shape, info, pre), cache)

    @classmethod
    def from_file(cls, path: Path, *, engine: SharedEngine | None = None,
                  cache: CompileCache | None = None,
                  caps: ModuleCaps | None = None) -> PluginModule:
        """Read and compile a module file; InvalidModule if it cannot be read."""
        try:
            wasm = read_regular(path, (caps or ModuleCaps()).max_module_bytes)
        except UnsafeFile as exc:
            if exc.too_large:
                raise ModuleTooLarge(f"{path}: {exc.strerror} (max_module_bytes)") from exc
            raise InvalidModule(f"{path}: cannot read: {exc.strerror}") from exc
        except OSError as exc:
            raise InvalidModule(f"{path}: cannot read: {exc.strerror}") from exc
        return cls(wasm, name=str(path), engine=engine, cache=cache, caps=caps)

    def _check(self, module: wasmtime.Module, digest: str, size: int,
               tables: tuple[int, ...], has_start: bool = True) -> ModuleInfo:
        imports = []
        uses_wasi = False
        for imp in module.imports:
            key = (imp.module, imp.name or "")
            imports.append(key)
            if imp.module == WASI_MODULE:
                uses_wasi = True
                want = wasi.SIGNATURES.get(key[1])
            else:
                want = IMPORTS.get(key)
            if want is None or not isinstance(imp.type, wasmtime.FuncType):
                raise UnknownImport(f"{self.name}: imports {imp.module}.{imp.name}, which the "
                                    "wasmext ABI (and its WASI preview1 subset) does not offer")
            if _sig(imp.type) != want:
                raise AbiMismatch(f"{self.name}: imports {imp.module}.{imp.name} with signature "
                                  f"{_sig(imp.type)}, ABI v1 says {want}")
        exports = {exp.name: exp.type for exp in module.exports}
        if "_start" in exports:
            raise AbiMismatch(f"{self.name}: exports _start; plugins must be WASI reactors "
                              "or freestanding libraries (build with -mexec-model=reactor)")
        memory = exports.get("memory")
        if not isinstance(memory, wasmtime.MemoryType):
            raise AbiMismatch(f"{self.name}: missing export 'memory'")
        for name, (params, results, required) in EXPORTS.items():
            ty = exports.get(name)
            if ty is None:
                if required:
                    raise AbiMismatch(f"{self.name}: missing export {name!r}")
                continue
            if not isinstance(ty, wasmtime.FuncType) or _sig(ty) != (params, results):
                raise AbiMismatch(f"{self.name}: export {name!r} must be a function "
                                  f"{params} -> {results}")
        return ModuleInfo(digest, size, tuple(exports), tuple(imports), uses_wasi,
                          "wasmext_free" in exports, "_initialize" in exports, tables,
                          has_start, memory.limits.min * WASM_PAGE)
