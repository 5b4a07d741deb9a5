"""The no-op guests every benchmark drives, written in WAT so nothing needs a toolchain.

* `echo_wat()`: a complete wasmext ABI v1 guest whose `wasmext_call` answers
  `{"ok": true, "value": D}` for a request `{"hook": <fixstr>, "data": D}`. It
  parses the request only as far as it must (a fixmap of two entries, the
  5-byte "hook" key, a fixstr hook name, the 5-byte "data" key), writes the
  11-byte response header into an output area and `memory.copy`s D after it.
  A request carrying "meta" is not supported (the benchmarks never send one).
* `echo_wat(wasi=True)`: the same guest importing `wasi_snapshot_preview1.fd_write`
  (never called), so that the host has to give it a WASI context.
* `EXTISM_ECHO_WAT`: the same work for the Extism ABI. `echo` copies the input
  into a block from the Extism kernel's allocator and sets it as the output;
  `empty` does nothing (the cheapest Extism call there is).
"""

from __future__ import annotations

import msgpack
import wasmtime

from wasmext.testing import DATA_AT, RESPONSE_AT, guest_wat, packed

__all__ = [
    "DATA",
    "ECHO_HOOK",
    "EXTISM_ECHO_WAT",
    "OUT_AT",
    "echo_wasm",
    "echo_wat",
    "extism_wasm",
]

ECHO_HOOK = "echo"

# ~100 bytes once MessagePack-encoded: fixmap(1) + "text"(5) + str8 header(2) + 92 chars.
_TEXT = ("Benchmarks measure the host, not the guest: "
         "this sentence is the payload, 92 chars long. ok!")
assert len(_TEXT) == 92
DATA: dict[str, str] = {"text": _TEXT}
assert len(msgpack.packb(DATA)) == 100

OUT_AT = 16384  # output area: header + D; the heap (input region) starts at 65536
_OUT_ROOM = 65536 - OUT_AT

# {"ok": true, "value": ...} header bytes 82 a2 'o' 'k' c3 a5 'v' 'a' 'l' 'u' 'e'
_HDR = bytes([0x82, 0xA2, 0x6F, 0x6B, 0xC3, 0xA5, 0x76, 0x61, 0x6C, 0x75, 0x65])
_HDR_LO = int.from_bytes(_HDR[:8], "little")
_HDR_LO_SIGNED = _HDR_LO - (1 << 64) if _HDR_LO >= 1 << 63 else _HDR_LO
_HDR_MID = int.from_bytes(_HDR[8:10], "little")
_HDR_END = _HDR[10]

_ECHO_BODY = f"""
    (local $d i32) (local $n i32)
    ;; $p: 0x82, then "hook" (0xa4 + 4 bytes) at $p+1, the fixstr tag at $p+6
    (local.set $d (i32.add (i32.add (local.get $p) (i32.const 12))
                           (i32.and (i32.load8_u (i32.add (local.get $p) (i32.const 6)))
                                    (i32.const 31))))
    ;; $d = $p + 7 + len(hook) + 5 ("data" key): the first byte of D
    (local.set $n (i32.sub (i32.add (local.get $p) (local.get $l)) (local.get $d)))
    (if (i32.gt_u (local.get $n) (i32.const {_OUT_ROOM - len(_HDR)})) (then unreachable))
    (i64.store (i32.const {OUT_AT}) (i64.const {_HDR_LO_SIGNED}))
    (i32.store16 (i32.const {OUT_AT + 8}) (i32.const {_HDR_MID}))
    (i32.store8 (i32.const {OUT_AT + 10}) (i32.const {_HDR_END}))
    (memory.copy (i32.const {OUT_AT + len(_HDR)}) (local.get $d) (local.get $n))
    (i64.or (i64.const {packed(OUT_AT, 0)})
            (i64.extend_i32_u (i32.add (local.get $n) (i32.const {len(_HDR)}))))"""

_WASI_IMPORT = ('(import "wasi_snapshot_preview1" "fd_write" '
                '(func $fd_write (param i32 i32 i32 i32) (result i32)))')


def echo_wat(*, wasi: bool = False) -> str:
    """The wasmext echo guest (see the module docstring)."""
    return guest_wat(_ECHO_BODY, hooks=(ECHO_HOOK,), imports=_WASI_IMPORT if wasi else "",
                     registration={"hooks": [{"hook": ECHO_HOOK}], "name": "bench-echo",
                                   "version": "1.0.0"})


def echo_wasm(*, wasi: bool = False) -> bytes:
    return bytes(wasmtime.wat2wasm(echo_wat(wasi=wasi)))


EXTISM_ECHO_WAT = r"""(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)
  (func (export "echo") (result i32)
    (local $n i64) (local $out i64) (local $i i64)
    (local.set $n (call $input_length))
    (local.set $out (call $alloc (local.get $n)))
    (block $words_done
      (loop $words
        (br_if $words_done (i64.gt_u (i64.add (local.get $i) (i64.const 8)) (local.get $n)))
        (call $store_u64 (i64.add (local.get $out) (local.get $i))
                         (call $input_load_u64 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 8)))
        (br $words)))
    (block $bytes_done
      (loop $bytes
        (br_if $bytes_done (i64.ge_u (local.get $i) (local.get $n)))
        (call $store_u8 (i64.add (local.get $out) (local.get $i))
                        (call $input_load_u8 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $bytes)))
    (call $output_set (local.get $out) (local.get $n))
    (i32.const 0))
  (func (export "empty") (result i32) (i32.const 0))
)"""


def extism_wasm() -> bytes:
    return bytes(wasmtime.wat2wasm(EXTISM_ECHO_WAT))


HOST_CALL_IMPORT = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
LOG_IMPORT = '(import "wasmext" "log" (func $log (param i32 i32 i32)))'


ANSWER_AT = 16384  # host_call_guests' answer region: past their data, before the heap


def host_call_guests() -> dict[str, str]:
    """The WAT of a `test` hook with no host call, with one `log` and with one
    `host_call` (config.get of "greeting"), by name: "none", "log", "get". Each declares
    an answer region (ABI minor 3), so the answer needs no `wasmext_alloc`."""
    line = b"one cheap host call"
    get = msgpack.packb({"op": "config.get", "key": "greeting"})
    resp = packed(RESPONSE_AT, len(msgpack.packb({"ok": True})))
    log_body = (f"(call $log (i32.const 2) (i32.const {DATA_AT}) (i32.const {len(line)}))"
                f"(i64.const {resp})")
    get_body = (f"(drop (call $host_call (i32.const {DATA_AT + 64}) (i32.const {len(get)})))"
                f"(i64.const {resp})")
    data = line.ljust(64, b"\0") + get

    def guest(body: str | None) -> str:
        return guest_wat(body, response={"ok": True}, imports=f"{HOST_CALL_IMPORT}{LOG_IMPORT}",
                         data=data, registration={"hooks": [{"hook": "test"}], "abi_minor": 3,
                                                  "answer_region": {"ptr": ANSWER_AT,
                                                                    "size": 4096}})

    return {"none": guest(None), "log": guest(log_body), "get": guest(get_body)}
