"""Compiling a module in a child process, under a deadline and a memory limit.

Compile time is not proportional to a module's bytes: 2,000 functions of 100 nested
loops (600 KB) took 5 s, 64 functions of 87,000 calls (16 MB, inside every byte cap of
`ModuleCaps`) two minutes and 1.1 GB, 99,000 element segments (0.4 MB, no code) 4 s,
and nothing in wasmtime stops a compile once it started. So a module with more bytes
of code and element segments than `ModuleCaps.inline_compile_bytes` is compiled by a
fresh interpreter that sets its own data limit (`compile_memory_bytes`) and is
killed at `compile_timeout_ms`; the host deserialises the code it writes. Either limit
reached is `ModuleTooLarge`, naming it; the host process never grew.

The child is this host's own code on this machine, given the engine's compiler
settings (`SharedEngine.compiler_settings`), so its code is what the engine would have
compiled; wasmtime still refuses code written for other settings when deserialising.
Where no child can be started (no interpreter to run, a sandbox refusing `exec`), the
module is compiled in the process, as before, and the log says so once.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import wasmtime

from wasmext.errors import InvalidModule, ModuleTooLarge
from wasmext.sandbox.engine import SharedEngine
from wasmext.sandbox.wasmcheck import ModuleCaps, ModuleShape
from wasmext.text import clean

__all__ = ["compile_bounded", "compile_component_bounded", "compile_in_child"]

log = logging.getLogger(__name__)

# Run with -I -S: no environment, no site packages; wasmtime's own folder is put on the
# path, and nothing else of the host is imported. Exit 3: wasmtime refused the module
# (its words on stderr); exit 4: MemoryError; past the data limit Rust's allocator aborts
# (SIGABRT); past the CPU limit the kernel sends SIGXCPU. Where a limit cannot be set
# (no `resource` module), the deadline's kill still holds.
_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
settings, memory, cpu_s = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    import resource
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
except (ImportError, AttributeError, ValueError, OSError):
    pass
import wasmtime
cfg = wasmtime.Config()
for name, value in settings.items():
    if not hasattr(type(cfg), name):
        sys.exit(f"wasmtime.Config has no {name}")
    setattr(cfg, name, value)
wasm = sys.stdin.buffer.read()
if sys.argv[5] == "component":
    from wasmtime import component
    kind = component.Component
else:
    kind = wasmtime.Module
try:
    code = kind(wasmtime.Engine(cfg), wasm).serialize()
except wasmtime.WasmtimeError as exc:
    sys.stderr.write(str(exc))
    sys.exit(3)
except MemoryError:
    sys.exit(4)
sys.stdout.buffer.write(code)
"""
_REFUSED, _OUT_OF_MEMORY = 3, 4
T = TypeVar("T")  # a compiled module or component
_ERROR_CHARS = 2000  # of wasmtime's words about a module it refuses
_fallback_logged = False


def compile_bounded(engine: SharedEngine, wasm: bytes, shape: ModuleShape, caps: ModuleCaps,
                    name: str) -> wasmtime.Module:
    """`wasm` compiled for `engine`: in this process when `caps` says its shape compiles
    in milliseconds, else in a child under `caps`' time and memory limits."""
    if caps.compiles_inline(shape):
        return engine.compile(wasm)
    return compile_in_child(engine, wasm, timeout_ms=caps.compile_timeout_ms,
                            memory_bytes=caps.compile_memory_bytes, name=name)


def compile_component_bounded(engine: SharedEngine, wasm: bytes, caps: ModuleCaps,
                              name: str) -> wasmtime.component.Component:
    """`wasm`, a component, compiled for `engine` in a child under `caps`' component
    limits (a componentized interpreter takes most of a minute: a child costs nothing
    next to it)."""
    from wasmtime import component as wc  # loaded where components are used

    return _from_child(engine, wasm, "component", caps.compile_component_timeout_ms,
                       caps.compile_component_memory_bytes, name, wc.Component.deserialize,
                       engine.compile_component)


def compile_in_child(engine: SharedEngine, wasm: bytes, *, timeout_ms: int,
                     memory_bytes: int, name: str) -> wasmtime.Module:
    """`wasm` compiled for `engine` by a child process within the limits.

    ModuleTooLarge when the compile ran out of time or memory, WasmtimeError (as from
    an inline compile) when wasmtime refused the module; in the process when no child
    can be started."""
    return _from_child(engine, wasm, "module", timeout_ms, memory_bytes, name,
                       wasmtime.Module.deserialize, engine.compile)


def _from_child(engine: SharedEngine, wasm: bytes, kind: str, timeout_ms: int,
                memory_bytes: int, name: str, deserialize: Callable[[wasmtime.Engine, bytes], T],
                compile_inline: Callable[[bytes], T]) -> T:
    """What a child compiled, deserialised for `engine` (InvalidModule when wasmtime
    refuses the code); compiled in the process when no child can be started."""
    code = _child_compiled(engine, wasm, kind, timeout_ms, memory_bytes, name)
    if code is None:
        return compile_inline(wasm)
    try:
        return deserialize(engine.engine, code)
    except wasmtime.WasmtimeError as exc:
        raise InvalidModule(f"{name}: the compiled code was refused: {exc}") from exc


def _child_compiled(engine: SharedEngine, wasm: bytes, kind: str, timeout_ms: int,
                    memory_bytes: int, name: str) -> bytes | None:
    """The serialized code a child compiled; None when no child could be started."""
    knob = "compile_component" if kind == "component" else "compile"  # ModuleCaps' names
    where = Path(wasmtime.__file__).resolve().parent.parent
    # CPU time is a backstop for a child the deadline's kill somehow missed: its
    # compiler threads together may use every core for the whole deadline.
    cpu_s = -(-timeout_ms * (os.cpu_count() or 1) // 1000) + 1
    argv = [sys.executable, "-I", "-S", "-c", _CHILD, str(where),
            json.dumps(engine.compiler_settings()), str(memory_bytes), str(cpu_s), kind]
    try:
        if not sys.executable:
            raise OSError("no interpreter to run (sys.executable is empty)")
        done = subprocess.run(argv, input=wasm, capture_output=True,
                              timeout=timeout_ms / 1000, check=False)
    except subprocess.TimeoutExpired as exc:  # run() killed and reaped the child
        raise ModuleTooLarge(f"{name}: compiling it took over the host's {knob}_timeout_ms "
                             f"{timeout_ms}") from exc
    except OSError as exc:
        _log_fallback(exc)
        return None
    if done.returncode == _REFUSED:
        # wasmtime's words, as an inline compile raises them: each caller names them.
        raise wasmtime.WasmtimeError(done.stderr.decode("utf-8", "replace")[:_ERROR_CHARS])
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise ModuleTooLarge(f"{name}: compiling it took over the host's {knob}_timeout_ms "
                             f"{timeout_ms}")
    if done.returncode in (_OUT_OF_MEMORY, -signal.SIGABRT):
        raise ModuleTooLarge(f"{name}: compiling it needed over the host's "
                             f"{knob}_memory_bytes {memory_bytes}")
    if done.returncode != 0:  # not the module's doing that anyone foresaw: said as it is
        why = clean(done.stderr.decode("utf-8", "replace")[-_ERROR_CHARS:], 500)
        raise InvalidModule(f"{name}: the compiler process failed (status "
                            f"{done.returncode}): {why}")
    return done.stdout


def _log_fallback(exc: OSError) -> None:
    global _fallback_logged
    if not _fallback_logged:
        _fallback_logged = True
        log.warning("no compiler process could be started (%s): modules compile in this "
                    "process, without compile_timeout_ms and compile_memory_bytes", exc)
