// Layer 2, safe: the memory the guest and the host hand each other
// (SPEC 1.4), logging, and host calls whose answers come back checked,
// decoded and owned by the garbage collector.

import { ErrorCode, LogLevel, Op } from "./abi";
import {
  Bytes, MsgpackError, Reader, Writer, scanMap3, span0, span1, span2, validate,
} from "./msgpack";
import * as raw from "./raw";

// ---------------------------------------------------------------------------
// Regions for the host (wasmext_alloc / wasmext_free)
//
// They come from the TLSF heap directly (heap.alloc), outside the garbage
// collector: the collector never sees, moves or frees them, so the input
// region the host keeps between calls stays put until the host gives it
// back with wasmext_free. heap.alloc aligns to 16 (the ABI asks for 8).

/** The last region handed out; during host_call that is the answer's. */
let lastAlloc: usize = 0;

/** The largest region the allocator can hand out (TLSF's block limit). */
const MAX_REGION: u32 = 0x3fff_0000;

/** Backs `wasmext_alloc`: `size` bytes aligned to 16, or 0 above 1 GiB.
 * Running out of memory below that traps (AssemblyScript's allocator cannot
 * report it), which the host reports as MemoryLimitExceeded at its cap. */
export function allocForHost(size: u32): usize {
  if (size > MAX_REGION) return 0;
  // A zero-length request still gets a distinct, real region.
  const p = heap.alloc(size != 0 ? <usize>size : 1);
  lastAlloc = p;
  return p;
}

/** How many bytes of answer the answer region holds (SPEC 1.4.1). */
export const ANSWER_AREA_SIZE: u32 = 1024;

/** The area declared as "answer_region" to a host of minor 3 (SPEC 1.4.1): the
 * host writes an answer that fits here instead of entering wasmext_alloc a
 * second time. A static segment: the collector never sees or moves it.
 * hostCallRaw copies every answer into a buffer of its own at once, so an
 * Answer outlives the host calls after it. */
export const ANSWER_AREA: usize = memory.data(1024, 16);

/** Backs `wasmext_free`: gives back a region from allocForHost. */
export function freeForHost(ptr: usize, size: u32): void {
  if (ptr != 0) heap.free(ptr);
}

// ---------------------------------------------------------------------------
// What the registration request said

let hostMinor: i32 = 0;
let thePluginId: string = "";

/** The ABI minor the host announced at registration (0 until then). */
export function hostAbiMinor(): i32 {
  return hostMinor;
}

/** The plugin id the host announced at registration ("" until then). */
export function pluginId(): string {
  return thePluginId;
}

/** Remembers what later calls may need from the registration request. A bad
 * request only loses this information: registering must still succeed. */
export function noteRegistration(ptr: usize, len: usize): void {
  if (validate(ptr, len) != MsgpackError.OK) return;
  const doc = new Reader(ptr, len);
  const abi = doc.find("abi");
  if (abi !== null) {
    const minor = abi.find("minor");
    if (minor !== null) {
      const v = minor.readInt();
      if (minor.ok && v >= 0 && v <= 0xffff) hostMinor = <i32>v;
    }
  }
  const plugin = doc.find("plugin");
  if (plugin !== null) {
    const id = plugin.find("id");
    if (id !== null) {
      const s = id.readString();
      if (id.ok) thePluginId = s;
    }
  }
}

// ---------------------------------------------------------------------------
// Logging

// Log text is encoded into one reused buffer.
const logBuffer = new Writer(256);

/** One line through the direct `log` import. The host cuts it to
 * max_log_line_bytes and replaces control characters. */
export function log(level: LogLevel, text: string): void {
  logBuffer.reset();
  logBuffer.appendString(text);
  raw.log(<i32>level, logBuffer.dataStart, <u32>logBuffer.length);
}

/** One line of UTF-8 bytes through the `log` import (no copy). */
export function logBytes(level: LogLevel, text: Bytes): void {
  raw.log(<i32>level, text.ptr, <u32>text.length);
}

// ---------------------------------------------------------------------------
// host_call

/** The host's answer to one host_call (SPEC 4.2), or an answer the SDK made
 * up when the host could not give one (`internal`). Everything in it is
 * managed memory: keep it as long as you like. */
export class Answer {
  /** `ok` of the answer. */
  ok: bool;
  /** `error.code` when `ok` is false (one of ErrorCode), else "". */
  code: string;
  /** `error.message` when `ok` is false ("" when absent). */
  message: string;
  // The answer map, and where in it the value lies (length 0: no value).
  private buf: ArrayBuffer;
  private valueAt: usize;
  private valueLength: usize;

  constructor(ok: bool, buf: ArrayBuffer, valueAt: usize, valueLength: usize, code: string,
    message: string) {
    this.ok = ok;
    this.buf = buf;
    this.valueAt = valueAt;
    this.valueLength = valueLength;
    this.code = code;
    this.message = message;
  }

  /** The whole answer map as the host sent it. */
  get raw(): Bytes {
    return Bytes.fromArrayBuffer(this.buf);
  }

  /** The encoded "value" (a nil when the answer has none). */
  get valueBytes(): Bytes {
    if (this.valueLength == 0) return new Bytes(NIL_BYTE, 1);
    return new Bytes(changetype<usize>(this.buf) + this.valueAt, <i32>this.valueLength, this.buf);
  }

  /** A fresh reader on the value. */
  get value(): Reader {
    if (this.valueLength == 0) return Reader.nil();
    return new Reader(changetype<usize>(this.buf) + this.valueAt, this.valueLength, this.buf);
  }

  /** The value as a string, or null when the answer failed or is not a string. */
  valueString(): string | null {
    if (!this.ok) return null;
    const r = this.value;
    const s = r.readString();
    return r.ok ? s : null;
  }

  /** Did the host refuse with this code (ErrorCode.*)? */
  is(code: string): bool {
    return !this.ok && this.code == code;
  }
}

const NIL_BYTE = memory.data<u8>([0xc0]);

export function localAnswer(code: string, message: string): Answer {
  const w = new Writer(64);
  w.writeMap(2);
  w.writeString("ok");
  w.writeBool(false);
  w.writeString("error");
  w.writeMap(2);
  w.writeString("code");
  w.writeString(code);
  w.writeString("message");
  w.writeString(message);
  return new Answer(false, w.toUint8Array().buffer, 0, 0, code, message);
}

/** Sends one encoded request map (`{"op": ..., args}`) and returns the
 * host's answer. Never fails: no answer, or a malformed one, becomes an
 * `internal` answer. The answer region is copied into managed memory and
 * given back to the allocator at once. */
export function hostCall(request: Bytes): Answer {
  return hostCallRaw(request.ptr, <u32>request.length);
}

/** hostCall with the bytes a Writer holds. */
export function hostCallWriter(request: Writer): Answer {
  return hostCallRaw(request.dataStart, <u32>request.length);
}

export function hostCallRaw(ptr: usize, len: u32): Answer {
  lastAlloc = 0;
  const packed = raw.host_call(ptr, len);
  if (packed == 0) return localAnswer(ErrorCode.INTERNAL, "the host could not deliver an answer");
  const p = raw.packedPtr(packed);
  const n = raw.packedLen(packed);
  const memEnd = <u64>memory.size() << 16;
  if (p == 0 || <u64>p + <u64>n > memEnd) {
    return localAnswer(ErrorCode.INTERNAL, "the host's answer lies outside memory");
  }
  const buf = new ArrayBuffer(<i32>n);
  memory.copy(changetype<usize>(buf), p, <usize>n);
  // Only a region this SDK handed out during the call is freed: a wrong free
  // would corrupt the heap, a missed one only leaks.
  if (p == lastAlloc) heap.free(p);
  lastAlloc = 0;
  return parseAnswer(buf);
}

function parseAnswer(buf: ArrayBuffer): Answer {
  const ptr = changetype<usize>(buf);
  const len = <usize>buf.byteLength;
  // One pass checks the whole answer and finds its three keys.
  if (scanMap3(ptr, len, "ok", "value", "error") != MsgpackError.OK || span0 == 0) return malformed();
  const okByte = load<u8>(<usize>(span0 >>> 32));
  const valueSpan = span1;
  const errorSpan = span2;
  if (okByte == 0xc3) {
    const at = valueSpan != 0 ? <usize>(valueSpan >>> 32) - ptr : 0;
    return new Answer(true, buf, at, <usize>(valueSpan & 0xffffffff), "", "");
  }
  if (okByte != 0xc2 || errorSpan == 0) return malformed();
  const e = new Reader(<usize>(errorSpan >>> 32), <usize>(errorSpan & 0xffffffff), buf);
  const codeR = e.find("code");
  if (codeR === null) return malformed();
  const code = codeR.readString();
  if (!codeR.ok) return malformed();
  let message = "";
  const m = e.find("message");
  if (m !== null) {
    const text = m.readString();
    if (m.ok) message = text;
  }
  return new Answer(false, buf, 0, 0, code, message);
}

function malformed(): Answer {
  return localAnswer(ErrorCode.INTERNAL, "the host's answer is malformed");
}

/** A new request map for any op: `{"op": op}` plus room for `args` more
 * pairs, which the caller writes next. Send it with hostCallWriter. */
export function request(op: string, args: u32 = 0): Writer {
  const w = new Writer(64);
  w.writeMap(args + 1);
  w.writeString("op");
  w.writeString(op);
  return w;
}

// The wrappers build their requests in one reused buffer.
const requestBuffer = new Writer(128);

function keyed(op: string, key: string): Answer {
  const w = requestBuffer;
  w.reset();
  w.writeMap(2);
  w.writeString("op");
  w.writeString(op);
  w.writeString("key");
  w.writeString(key);
  return hostCallWriter(w);
}

/** `config.get` of one setting: its value, `not_found` when unset, `denied`
 * when it is sensitive (use secretGet). */
export function configGet(key: string): Answer {
  return keyed(Op.CONFIG_GET, key);
}

/** `config.get` without a key: a map of every non-sensitive setting. */
export function configAll(): Answer {
  const w = requestBuffer;
  w.reset();
  w.writeMap(1);
  w.writeString("op");
  w.writeString(Op.CONFIG_GET);
  return hostCallWriter(w);
}

/** `secret.get`: a sensitive setting (needs the `secrets` capability). */
export function secretGet(key: string): Answer {
  return keyed(Op.SECRET_GET, key);
}

/** `abi.info`: `{major, minor, host, version, limits}`. */
export function abiInfo(): Answer {
  const w = requestBuffer;
  w.reset();
  w.writeMap(1);
  w.writeString("op");
  w.writeString(Op.ABI_INFO);
  return hostCallWriter(w);
}
