"""Helpers for testing plugins and hosts: tiny ABI-complete guests from inline WAT.

    from wasmext.testing import guest_wat, load_wat

    wat = guest_wat(call_body="(loop (br 0)) (i64.const 0)")
    plugin = load_wat(runtime, wat, limits={"timeout_ms": 50})

`guest_wat` writes the boring parts of ABI v1 (memory, a bump allocator,
the version export, a registration map) so a test states only the behaviour
under test. Everything here builds real WebAssembly; nothing is mocked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import msgpack
import wasmtime

from wasmext.errors import WasmextError
from wasmext.runtime import Runtime
from wasmext.sandbox.engine import EngineConfig

__all__ = ["DATA_AT", "HOST_CALL_IMPORT", "build_plugin", "guest_wat", "host_calls_wat",
           "load_wat", "make_host", "packed", "vector_value", "wat_bytes"]

REGISTER_AT = 1024
RESPONSE_AT = 4096
DATA_AT = 8192  # `data` segments passed to guest_wat start here
HEAP_START = 65536
HOST_CALL_IMPORT = ('(import "wasmext" "host_call" '
                    '(func $host_call (param i32 i32) (result i64)))')


def packed(ptr: int, length: int) -> int:
    """The i64 a guest returns for a buffer, as a signed value for `i64.const`."""
    value = (ptr << 32) | length
    return value - (1 << 64) if value >= 1 << 63 else value


def wat_bytes(data: bytes) -> str:
    """`data` as a WAT string literal body."""
    return "".join(f"\\{b:02x}" for b in data)


def guest_wat(call_body: str | None = None, *, response: Any = None,
              hooks: tuple[str, ...] = ("test",), abi_version: int = 1,
              registration: Any = None, memory_pages: int = 2,
              max_pages: int | None = None, imports: str = "", extra: str = "",
              data: bytes = b"", alloc_body: str | None = None,
              heap_start: int = HEAP_START) -> str:
    """A complete ABI v1 guest in WAT.

    `call_body` is the body of `wasmext_call (param $p i32) (param $l i32) (result i64)`;
    by default it returns `response` (a value MessagePack-encoded into the module,
    default {"ok": true, "value": "ok"}). `data` is placed at DATA_AT. `$alloc`
    is a bump allocator from `heap_start` growing memory as needed (0 when it cannot).
    A registration map too long for its fixed place goes past `data`; the memory holds
    both, and the heap starts on the first page past them, so what `$alloc` hands out
    never overlaps them.
    """
    reg = msgpack.packb(registration if registration is not None else
                        {"hooks": [{"hook": h} for h in hooks], "name": "wat-test"})
    reg_at = REGISTER_AT
    if len(reg) > RESPONSE_AT - REGISTER_AT:
        reg_at = (DATA_AT + len(data) + 7) // 8 * 8
    pages_used = -(-max(DATA_AT + len(data), reg_at + len(reg)) // 65536)
    heap_start = max(heap_start, pages_used * 65536)
    memory_pages = max(memory_pages, pages_used)
    resp = msgpack.packb(response if response is not None else {"ok": True, "value": "ok"})
    if call_body is None:
        call_body = f"(i64.const {packed(RESPONSE_AT, len(resp))})"
    if alloc_body is None:
        alloc_body = """
        (local $p i32) (local $end i32)
        (local.set $p (global.get $heap))
        (local.set $end (i32.and (i32.add (i32.add (global.get $heap) (local.get $n)) (i32.const 7))
                                 (i32.const -8)))
        (if (i32.gt_u (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
          (then
            (if (i32.eq (memory.grow (i32.sub (i32.add (i32.shr_u (local.get $end) (i32.const 16))
                                                       (i32.const 1))
                                              (memory.size)))
                        (i32.const -1))
              (then (return (i32.const 0))))))
        (global.set $heap (local.get $end))
        (local.get $p)"""
    maximum = f" {max_pages}" if max_pages is not None else ""
    data_seg = f'(data (i32.const {DATA_AT}) "{wat_bytes(data)}")' if data else ""
    return f"""(module
  {imports}
  (memory (export "memory") {memory_pages}{maximum})
  (global $heap (mut i32) (i32.const {heap_start}))
  (data (i32.const {reg_at}) "{wat_bytes(reg)}")
  (data (i32.const {RESPONSE_AT}) "{wat_bytes(resp)}")
  {data_seg}
  (func (export "wasmext_abi_version") (result i32) (i32.const {abi_version}))
  (func $alloc (export "wasmext_alloc") (param $n i32) (result i32) {alloc_body})
  (func (export "wasmext_register") (param i32 i32) (result i64)
    (i64.const {packed(reg_at, len(reg))}))
  (func (export "wasmext_call") (param $p i32) (param $l i32) (result i64) {call_body})
  {extra}
)"""



def host_calls_wat(*requests: Any, then: str = "", hooks: tuple[str, ...] = ("test",),
                   registration: Any = None) -> str:
    """A guest whose hook sends each request (a map, MessagePack-encoded into the
    module) through `host_call` in turn and answers with the last one's answer, or
    sends all of them and then runs `then` (a trap, say).

    The requests sit at DATA_AT and guest_wat starts the allocator past them, so answers
    the host writes never land on a request still to be sent.
    """
    blobs = [msgpack.packb(r) for r in requests]
    data, calls, at = b"", [], DATA_AT
    for blob in blobs:
        calls.append(f"(call $host_call (i32.const {at}) (i32.const {len(blob)}))")
        data += blob
        at += len(blob)
    body = "".join(f"(drop {c})" for c in (calls if then else calls[:-1]))
    body += then if then else calls[-1]
    return guest_wat(body, imports=HOST_CALL_IMPORT, data=data, hooks=hooks,
                     registration=registration)


def load_wat(runtime: Runtime, wat: str, plugin_id: str = "wat-test", **kwargs: Any) -> Any:
    """Compile `wat` and load it into `runtime` as `plugin_id`."""
    return runtime.load(bytes(wasmtime.wat2wasm(wat)), plugin_id=plugin_id, **kwargs)


def vector_value(v: Any) -> Any:
    """A value from abi/vectors JSON: {"$bin": hex} is bytes, {"$f64": repr} a float."""
    if isinstance(v, dict) and set(v) == {"$bin"}:
        return bytes.fromhex(v["$bin"])
    if isinstance(v, dict) and set(v) == {"$f64"}:
        return float(v["$f64"])
    if isinstance(v, list):
        return [vector_value(x) for x in v]
    if isinstance(v, dict):
        return {k: vector_value(x) for k, x in v.items()}
    return v


def make_host(*plugins: Any, config: Any = None) -> Any:
    """A Host (no discovery, no disk cache) holding `plugins`.

    Each item is WAT text (starting with "(module"), module bytes, a path (plugin
    folder, .wasm or .wat), or a (source, options) pair where options are
    `Host.add` keyword arguments such as plugin_id, settings, priority, failure.
    Close it (or use it as a context manager) when done. Without `config` the host
    keeps its state in memory and its data folder (approvals, enable choices) in a
    temporary folder removed with the host, so every host starts empty and a test
    writes nothing to the folder it runs in.
    """
    from wasmext.config import HostConfig
    from wasmext.host import Host

    scratch = None
    if config is None:
        scratch = tempfile.mkdtemp(prefix="wasmext-test-")
        config = HostConfig(data_dir=Path(scratch), state_backend="memory")
    runtime = Runtime(cache=False, defaults=config.limits, policy=config.cap,
                      engine=EngineConfig(instance_pool=config.instance_pool))
    host = Host(config, runtime=runtime, plugin_dirs=[])
    if scratch is not None:
        weakref.finalize(host, shutil.rmtree, scratch, ignore_errors=True)
    for n, item in enumerate(plugins):
        source, options = item if isinstance(item, tuple) else (item, {})
        options = dict(options)
        if isinstance(source, str) and source.lstrip().startswith("(module"):
            source = bytes(wasmtime.wat2wasm(source))
            options.setdefault("plugin_id", f"wat-{n}")
        elif isinstance(source, str):
            source = Path(source)
        host.add(source, **options)
    return host


def build_plugin(folder: str | os.PathLike[str]) -> Path:
    """Build the plugin project in `folder` with `wasmext build` (the command authors run)
    and return its .wasm; AssertionError with the build's message when it fails."""
    import subprocess
    import sys

    from wasmext.buildstamp import still_fresh
    from wasmext.manifest import load_folder

    # Nothing changed since the last build (what `wasmext build` checks first): no second
    # interpreter, CLI and toolchain to start. The load that follows compiles the module
    # into the cache if `wasmext build` could not.
    try:
        wasm = load_folder(Path(folder)).wasm_path
    except WasmextError:
        wasm = None  # the build says what is wrong with the folder
    if wasm is not None and still_fresh(wasm):
        return wasm

    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "build", "--quiet"],
                          cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"wasmext build failed: {(proc.stderr or proc.stdout).strip()}")
    return Path(proc.stdout.strip().splitlines()[-1])
