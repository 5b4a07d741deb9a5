// Test harness for the SDK's own unit tests (tests/sdks/test_assemblyscript_sdk.py).
//
// It is compiled like a plugin (same flags, so it imports only wasmext.* and,
// for Math.random, WASI random_get) and driven from Python through wasmtime
// with a fake host. Functions taking bytes get them in a region from
// wasmext_alloc. A result of type i64 is `(ptr << 32) | len` of bytes in the
// result buffer, or a negative MsgpackError.

import {
  Answer, Bytes, Call, ErrorCode, LogLevel, MsgpackError, Reader, Reply, Type, Writer, configAll,
  configGet, definePlugin, hostAbiMinor, hostCallRaw, log, pluginId, request, hostCallWriter,
  secretGet, utf8Equals, utf8Valid, validate, validateUtf8, NO_PRIORITY,
} from "@wasmext/as-sdk";
export * from "@wasmext/as-sdk/exports";

const result = new Writer(1024);

function ok(): i64 {
  return <i64>((<u64>result.dataStart << 32) | <u64><u32>result.length);
}

function err(e: MsgpackError): i64 {
  return <i64>e;
}

// ---- reader and writer ------------------------------------------------------

/** Decode one value token by token, re-encode it, and require the end. */
export function t_copy(ptr: usize, len: u32): i64 {
  result.reset();
  const r = new Reader(ptr, len);
  if (!result.copyValue(r)) return err(r.err);
  if (!r.finish()) return err(r.err);
  return ok();
}

/** Decode with the typed reads (strings through UTF-16) and re-encode with the typed writes. */
export function t_typed(ptr: usize, len: u32): i64 {
  result.reset();
  const r = new Reader(ptr, len);
  typedCopy(r, 0);
  if (!r.finish()) return err(r.err);
  return ok();
}

function typedCopy(r: Reader, depth: i32): void {
  if (depth > 64) {
    r.err = MsgpackError.DEPTH;
    return;
  }
  const t = r.peekType();
  switch (t) {
    case Type.NIL: r.readNil(); result.writeNil(); break;
    case Type.BOOL: result.writeBool(r.readBool()); break;
    case Type.INT: result.writeInt(r.readInt()); break;
    case Type.UINT: result.writeUint(r.readUint()); break;
    case Type.FLOAT: result.writeFloat(r.readFloat()); break;
    case Type.STR: result.writeString(r.readString()); break;
    case Type.BIN: result.writeBin(r.readBin()); break;
    case Type.ARRAY: {
      const n = r.readArray();
      result.writeArray(n);
      for (let i: u32 = 0; i < n && r.ok; i++) typedCopy(r, depth + 1);
      break;
    }
    case Type.MAP: {
      const n = r.readMap();
      result.writeMap(n);
      for (let i: u32 = 0; i < n && r.ok; i++) {
        if (r.peekType() != Type.STR) {
          r.err = MsgpackError.MALFORMED;
          return;
        }
        typedCopy(r, depth + 1);
        typedCopy(r, depth + 1);
      }
      break;
    }
    default:
      r.next(); // sets the error
      if (r.ok) r.err = MsgpackError.MALFORMED;
  }
}

export function t_validate(ptr: usize, len: u32): i32 {
  return validate(ptr, len);
}

export function t_validate_utf8(ptr: usize, len: u32): i32 {
  return validateUtf8(ptr, len);
}

/** Skip one value: the bytes consumed, or the error. */
export function t_skip(ptr: usize, len: u32): i64 {
  const r = new Reader(ptr, len);
  return r.skip() ? <i64>(r.pos - ptr) : err(r.err);
}

/** readRaw: the span of the value, as bytes in the result. */
export function t_read_raw(ptr: usize, len: u32): i64 {
  result.reset();
  const r = new Reader(ptr, len);
  const raw = r.readRaw();
  if (!r.ok) return err(r.err);
  result.writeRaw(raw);
  return ok();
}

export function t_utf8_valid(ptr: usize, len: u32): i32 {
  return utf8Valid(ptr, len) ? 1 : 0;
}

/** Do the first bytes equal the UTF-8 encoding of the second (decoded to a string)? */
export function t_utf8_equals(aPtr: usize, aLen: u32, sPtr: usize, sLen: u32): i32 {
  return utf8Equals(aPtr, aLen, String.UTF8.decodeUnsafe(sPtr, sLen)) ? 1 : 0;
}

// Typed reads: the value, with the reader's error in lastErr and where it stopped in lastPos.
let lastErr: i32 = 0;
let lastPos: i32 = 0;

export function t_last_err(): i32 {
  return lastErr;
}

export function t_last_pos(): i32 {
  return lastPos;
}

function done(r: Reader, start: usize): void {
  lastErr = r.err;
  lastPos = <i32>(r.pos - start);
}

export function t_read_int(ptr: usize, len: u32): i64 {
  const r = new Reader(ptr, len);
  const v = r.readInt();
  done(r, ptr);
  return v;
}

export function t_read_uint(ptr: usize, len: u32): u64 {
  const r = new Reader(ptr, len);
  const v = r.readUint();
  done(r, ptr);
  return v;
}

export function t_read_i32(ptr: usize, len: u32): i32 {
  const r = new Reader(ptr, len);
  const v = r.readI32();
  done(r, ptr);
  return v;
}

export function t_read_float(ptr: usize, len: u32): f64 {
  const r = new Reader(ptr, len);
  const v = r.readFloat();
  done(r, ptr);
  return v;
}

export function t_read_bool(ptr: usize, len: u32): i32 {
  const r = new Reader(ptr, len);
  const v = r.readBool();
  done(r, ptr);
  return v ? 1 : 0;
}

export function t_read_string(ptr: usize, len: u32): i64 {
  result.reset();
  const r = new Reader(ptr, len);
  const s = r.readString();
  done(r, ptr);
  result.appendString(s);
  return ok();
}

export function t_read_array(ptr: usize, len: u32): u32 {
  const r = new Reader(ptr, len);
  const v = r.readArray();
  done(r, ptr);
  return v;
}

export function t_read_map(ptr: usize, len: u32): u32 {
  const r = new Reader(ptr, len);
  const v = r.readMap();
  done(r, ptr);
  return v;
}

/** Two reads in a row: the first fails, so the second must return 0 and keep the first error. */
export function t_sticky(ptr: usize, len: u32): i64 {
  const r = new Reader(ptr, len);
  r.readString();
  const second = r.readInt();
  done(r, ptr);
  return second;
}

export function t_peek(ptr: usize, len: u32): i32 {
  const r = new Reader(ptr, len);
  const t = r.peekType();
  done(r, ptr);
  return t;
}

/** Reader.find: the value of the key, or -1 when absent. */
export function t_find(ptr: usize, len: u32, kPtr: usize, kLen: u32): i64 {
  result.reset();
  const r = new Reader(ptr, len);
  const v = r.find(String.UTF8.decodeUnsafe(kPtr, kLen));
  if (v === null) return -1;
  result.writeRaw(new Bytes(v.pos, <i32>(v.end - v.pos)));
  return ok();
}

export function t_write_int(v: i64): i64 {
  result.reset();
  result.writeInt(v);
  return ok();
}

export function t_write_uint(v: u64): i64 {
  result.reset();
  result.writeUint(v);
  return ok();
}

export function t_write_float(v: f64): i64 {
  result.reset();
  result.writeFloat(v);
  return ok();
}

/** Headers only: 0 str, 1 bin, 2 array, 3 map. */
export function t_write_header(kind: i32, n: u32): i64 {
  result.reset();
  if (kind == 0) result.writeStrHeader(n);
  else if (kind == 1) result.writeBinHeader(n);
  else if (kind == 2) result.writeArray(n);
  else result.writeMap(n);
  return ok();
}

/** writeString of the UTF-8 text given (decoded to a string first). */
export function t_write_string(ptr: usize, len: u32): i64 {
  result.reset();
  result.writeString(String.UTF8.decodeUnsafe(ptr, len));
  return ok();
}

/** writeString of a string with a lone surrogate: must come out as U+FFFD. */
export function t_write_lone_surrogate(): i64 {
  result.reset();
  result.writeString("a" + String.fromCharCode(0xd800) + "b");
  return ok();
}

/** Writer growth: n small values, then the bytes. */
export function t_write_many(n: i32): i64 {
  result.reset();
  result.writeArray(<u32>n);
  for (let i = 0; i < n; i++) result.writeInt(i - 40);
  return ok();
}

/** truncate / reset / toUint8Array / Bytes helpers. */
export function t_writer_misc(): i32 {
  const w = new Writer(1);
  w.writeString("hello");
  if (w.length != 6) return 1;
  w.truncate(1);
  if (w.length != 1) return 2;
  w.truncate(5); // longer: no-op
  if (w.length != 1) return 3;
  w.appendString("héllo");
  const a = w.toUint8Array();
  if (a.length != 7 || a[0] != 0xa5 || a[1] != 0x68) return 4;
  const b = w.bytes();
  if (b.at(2) != 0xc3 || !Bytes.fromString("héllo").equalsBytes(new Bytes(b.ptr + 1, 6))) return 5;
  if (new Bytes(b.ptr + 1, 6).toString() != "héllo") return 6;
  w.reset();
  if (w.length != 0) return 7;
  const u = Bytes.fromUint8Array(a);
  if (u.length != 7 || u.at(6) != 0x6f) return 8;
  if (!Bytes.fromString("ok").equals("ok") || Bytes.fromString("ok").equals("oK")) return 9;
  return 0;
}

// ---- host services (the fake host answers from Python) -----------------------

/** An Answer, described as a map the Python side decodes. */
function describe(a: Answer): i64 {
  result.reset();
  result.writeMap(5);
  result.writeString("ok");
  result.writeBool(a.ok);
  result.writeString("code");
  result.writeString(a.code);
  result.writeString("message");
  result.writeString(a.message);
  result.writeString("value");
  const v = a.value;
  if (!result.copyValue(v)) result.writeString("<unreadable>");
  result.writeString("raw");
  result.writeBinBytes(a.raw);
  return ok();
}

export function t_host_call(ptr: usize, len: u32): i64 {
  return describe(hostCallRaw(ptr, len));
}

export function t_config_get(ptr: usize, len: u32): i64 {
  return describe(configGet(String.UTF8.decodeUnsafe(ptr, len)));
}

export function t_config_all(): i64 {
  return describe(configAll());
}

export function t_secret_get(ptr: usize, len: u32): i64 {
  return describe(secretGet(String.UTF8.decodeUnsafe(ptr, len)));
}

/** request("state.get", 1) + key, sent with hostCallWriter. */
export function t_request(): i64 {
  const w = request("state.get", 1);
  w.writeString("key");
  w.writeString("k");
  return describe(hostCallWriter(w));
}

/** valueString of config.get(key): the string or "<null>". */
export function t_value_string(ptr: usize, len: u32): i64 {
  result.reset();
  const s = configGet(String.UTF8.decodeUnsafe(ptr, len)).valueString();
  result.appendString(s !== null ? s : "<null>");
  return ok();
}

export function t_log(level: i32, ptr: usize, len: u32): void {
  log(<LogLevel>level, String.UTF8.decodeUnsafe(ptr, len));
}

export function t_host_minor(): i32 {
  return hostAbiMinor();
}

export function t_plugin_id(): i64 {
  result.reset();
  result.appendString(pluginId());
  return ok();
}

// ---- runtime replacements --------------------------------------------------

export function t_abort(): void {
  abort("boom");
}

export function t_bounds(i: i32): i32 {
  const a = new Array<i32>(2);
  return a[i];
}

export function t_throw(): void {
  throw new Error("thrown on purpose");
}

export function t_trace(): void {
  trace("tracing", 2, 1.5, 2);
}

export function t_console(): void {
  console.log("to info");
  console.debug("to debug");
  console.warn("to warn");
  console.error("to error");
  console.assert(1 + 1 == 3, "math");
}

export function t_console_time(): void {
  console.time("step");
  console.timeEnd("step");
  console.timeLog("step"); // ended: warns
}

export function t_random(): f64 {
  return Math.random();
}

// ---- dispatch: hooks with every kind of reply -------------------------------

function echo(call: Call): Reply {
  if (!call.out.copyValue(call.data)) return call.fail(ErrorCode.INVALID, "undecodable");
  return Reply.VALUE;
}

function wroteNothing(call: Call): Reply {
  return Reply.VALUE;
}

function badCount(call: Call): Reply {
  call.out.writeArray(2);
  call.out.writeInt(1);
  return Reply.VALUE;
}

function twoValues(call: Call): Reply {
  call.out.writeInt(1);
  call.out.writeInt(2);
  return Reply.VALUE;
}

function failNoMessage(call: Call): Reply {
  call.out.writeInt(1); // dropped
  return call.fail(ErrorCode.FAILED);
}

function failedWithoutFail(call: Call): Reply {
  return Reply.FAILED;
}

function stopBare(call: Call): Reply {
  return Reply.STOP;
}

function stopValue(call: Call): Reply {
  call.out.writeString("halt");
  return Reply.STOP;
}

function resetsOut(call: Call): Reply {
  call.out.writeInt(7);
  call.out.reset(); // must not lose the response prefix
  call.out.writeInt(8);
  return Reply.VALUE;
}

function hookName(call: Call): Reply {
  return call.returnString(call.hook);
}

function metaEcho(call: Call): Reply {
  const meta = call.meta;
  if (meta === null) return call.returnString("no meta");
  call.out.copyValue(meta);
  return Reply.VALUE;
}

function tagA(call: Call): Reply {
  return call.returnString("pii handler");
}

function tagB(call: Call): Reply {
  return call.returnString("exact handler");
}

function dataString(call: Call): Reply {
  const s = call.dataString();
  return call.returnString(s !== null ? "string:" + s : "not a string");
}

function deepValue(call: Call): Reply {
  // n nested arrays around a nil, n = data
  const n = <i32>call.data.readInt();
  for (let i = 0; i < n; i++) call.out.writeArray(1);
  call.out.writeNil();
  return Reply.VALUE;
}

function hostFails(call: Call): Reply {
  const a = configGet("missing");
  if (!a.ok) return call.failWith(a);
  return Reply.UNCHANGED;
}

function aborts(call: Call): Reply {
  abort("boom");
  return Reply.UNCHANGED;
}

function outOfBounds(call: Call): Reply {
  const a = new Array<i32>(1);
  call.out.writeInt(a[<i32>call.data.readInt()]);
  return Reply.VALUE;
}

function extra(w: Writer): u32 {
  w.writeString("prompt");
  w.writeString("be nice");
  return 1;
}

definePlugin("harness", "9.9.9")
  .hook("echo", echo)
  .hook("wrote_nothing", wroteNothing)
  .hook("bad_count", badCount)
  .hook("two_values", twoValues)
  .hook("fail_no_message", failNoMessage)
  .hook("failed_without_fail", failedWithoutFail)
  .hook("stop_bare", stopBare)
  .hook("stop_value", stopValue)
  .hook("resets_out", resetsOut)
  .hook("hook_name", hookName, 90)
  .hook("meta", metaEcho)
  .hook("on_tag", tagA, NO_PRIORITY, "pii.*")
  .hook("on_tag", tagB, 10, "exact")
  .hook("registered_only", null)
  .hook("data_string", dataString)
  .hook("deep_value", deepValue)
  .hook("host_fails", hostFails)
  .hook("aborts", aborts)
  .hook("out_of_bounds", outOfBounds)
  .extra(extra);
