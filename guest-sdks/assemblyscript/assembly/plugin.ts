// Layer 3, the plugin interface: a plugin names its hooks and handler
// functions once (definePlugin(...).hook(...)); the SDK answers registration
// (SPEC 3) and dispatches every call (SPEC 4.1). A hook that is not listed
// answers "unhandled"; a listed hook without a handler answers "unchanged".

import { ABI_MINOR, ANSWER_REGION_SINCE, ErrorCode } from "./abi";
import { ANSWER_AREA, ANSWER_AREA_SIZE, Answer, hostAbiMinor, noteRegistration } from "./host";
import {
  Bytes, MAX_DEPTH, MsgpackError, Reader, Type, Writer, scanMap3, span0, span1, span2, utf8Equals,
  validate,
} from "./msgpack";
import * as raw from "./raw";

/** What a handler answers. */
export enum Reply {
  /** `{"ok": true, "value": v}` with v the one value written to `call.out`. */
  VALUE,
  /** `{"ok": true}`: the host passes the input on unchanged (`out` is ignored). */
  UNCHANGED,
  /** Like VALUE plus `"stop": true`; with nothing written, stop without a value. */
  STOP,
  /** `{"ok": false, "error": ...}`: returned by `call.fail()` / `call.failWith()`. */
  FAILED,
}

/** A hook handler. */
export type Handler = (call: Call) => Reply;

/** Registration entries beyond the standard ones: write `key, value` pairs
 * (e.g. "prompt", "tool_guidance") and return how many pairs were written. */
export type ExtraEntries = (w: Writer) => u32;

/** Leave "priority" out of the registration: the host uses the manifest's. */
export const NO_PRIORITY: i32 = -1;

/** One hook of the registration map. */
export class Hook {
  constructor(
    public name: string,
    public handler: Handler | null,
    public priority: i32,
    public pattern: string | null,
  ) {}
}

/** The plugin's registration: name, version, hooks. There is one, `plugin`. */
export class PluginDefinition {
  name: string | null = null;
  version: string | null = null;
  hooks: Hook[] = [];
  extraEntries: ExtraEntries | null = null;

  /** Adds a hook. `priority` 0..100 (higher runs earlier) or NO_PRIORITY;
   * `pattern` is a tag pattern (on_tag) or output name: an exact name or a
   * prefix ending in `*`, matched against the data's "tag" or "name" when
   * the call is dispatched. A null handler registers the hook and always
   * answers unchanged. A priority outside 0..100 aborts at start-up. */
  hook(name: string, handler: Handler | null, priority: i32 = NO_PRIORITY,
    pattern: string | null = null): PluginDefinition {
    if (priority != NO_PRIORITY && (priority < 0 || priority > 100)) {
      abort("hook '" + name + "': priority must be 0..100");
    }
    this.hooks.push(new Hook(name, handler, priority, pattern));
    return this;
  }

  /** Sets a function writing extra registration entries. */
  extra(fn: ExtraEntries): PluginDefinition {
    this.extraEntries = fn;
    return this;
  }
}

/** The plugin this module defines. */
export const plugin = new PluginDefinition();

/** Names the plugin (display name and version for the registration map). */
export function definePlugin(name: string, version: string): PluginDefinition {
  plugin.name = name;
  plugin.version = version;
  return plugin;
}

/** One hook call as a handler sees it. The readers point into the request,
 * which the host owns: they are valid until the handler returns. */
export class Call {
  /** The hook name. */
  hook: string;
  /** Reader on the request's "data" (a nil when absent). */
  data: Reader;
  /** Reader on the request's "meta", or null. */
  meta: Reader | null;
  /** Write the result value here: exactly one value, then return Reply.VALUE or STOP. */
  out: Writer;
  /** Set by fail(): the error to answer. */
  failed: bool = false;
  failCode: string = "";
  failMessage: string = "";

  constructor(hook: string, data: Reader, meta: Reader | null, out: Writer) {
    this.hook = hook;
    this.data = data;
    this.meta = meta;
    this.out = out;
  }

  /** The data as a string, or null when it is not one. */
  dataString(): string | null {
    const r = this.data.clone();
    const s = r.readString();
    return r.ok ? s : null;
  }

  /** Writes `s` as the value: `return call.returnString(s)`. */
  returnString(s: string): Reply {
    this.out.writeString(s);
    return Reply.VALUE;
  }

  /** Writes one already encoded value: `return call.returnRaw(bytes)`. */
  returnRaw(value: Bytes): Reply {
    this.out.writeRaw(value);
    return Reply.VALUE;
  }

  /** Answers `{"ok": false, "error": {code, message}}`: `return call.fail(...)`.
   * An empty message is left out. */
  fail(code: string, message: string = ""): Reply {
    this.failed = true;
    this.failCode = code;
    this.failMessage = message;
    return Reply.FAILED;
  }

  /** Passes a failed host answer's code and message on as the hook's error. */
  failWith(answer: Answer): Reply {
    if (answer.ok) return this.fail(ErrorCode.INTERNAL, "host_call did not fail");
    return this.fail(answer.code, answer.message);
  }
}

// ---------------------------------------------------------------------------
// The exports' implementation (exports.ts exports them under the ABI names)

/** The one output buffer (SPEC 1.4): the host copies a response before it
 * enters the guest again, so every entry reuses it. A handler's value is
 * written straight into it, behind the prefix {"ok": true, "value": which
 * the handler's view (call.out) does not show. */
const output = new Writer(1024);

// @ts-ignore: decorator
@inline
function finish(): u64 {
  return raw.pack(output.fullStart, <u32>output.fullLength);
}

export function register(ptr: usize, len: u32): u64 {
  noteRegistration(ptr, <usize>len);
  const p = plugin;
  const w = output;
  w.hidePrefix(false);
  w.reset();
  let extraCount: u32 = 0;
  let extraBytes: Bytes | null = null;
  const extraFn = p.extraEntries;
  if (extraFn !== null) {
    const extra = new Writer(256);
    extraCount = extraFn(extra);
    extraBytes = extra.bytes();
  }
  // Without extra entries the map is the hook table the module defined at start-up,
  // the same for every copy: the host may reuse it (abi/SPEC.md 3.2).
  const shareable = extraFn === null;
  // An older host would keep the key as an unknown one: it is left out there.
  const area = hostAbiMinor() >= ANSWER_REGION_SINCE;
  w.writeMap(2 + (p.name !== null ? 1 : 0) + (p.version !== null ? 1 : 0) + extraCount +
             (shareable ? 1 : 0) + (area ? 1 : 0));
  w.writeString("abi_minor");
  w.writeInt(ABI_MINOR);
  if (area) {
    w.writeString("answer_region");
    w.writeMap(2);
    w.writeString("ptr");
    w.writeInt(<i64>ANSWER_AREA);
    w.writeString("size");
    w.writeInt(<i64>ANSWER_AREA_SIZE);
  }
  if (shareable) {
    w.writeString("shareable");
    w.writeBool(true);
  }
  const name = p.name;
  if (name !== null) {
    w.writeString("name");
    w.writeString(name);
  }
  const version = p.version;
  if (version !== null) {
    w.writeString("version");
    w.writeString(version);
  }
  w.writeString("hooks");
  const hooks = p.hooks;
  w.writeArray(<u32>hooks.length);
  for (let i = 0; i < hooks.length; i++) {
    const h = hooks[i];
    const hasPrio = h.priority != NO_PRIORITY;
    const pattern = h.pattern;
    w.writeMap(1 + (hasPrio ? 1 : 0) + (pattern !== null ? 1 : 0));
    w.writeString("hook");
    w.writeString(h.name);
    if (hasPrio) {
      w.writeString("priority");
      w.writeInt(h.priority);
    }
    if (pattern !== null) {
      w.writeString("pattern");
      w.writeString(pattern);
    }
  }
  if (extraBytes !== null && extraCount > 0) w.writeRaw(extraBytes);
  return finish();
}

function writeFailure(code: string, message: string): void {
  const w = output;
  w.hidePrefix(false);
  w.reset();
  const hasMessage = message.length > 0;
  w.writeMap(2);
  w.writeString("ok");
  w.writeBool(false);
  w.writeString("error");
  w.writeMap(hasMessage ? 2 : 1);
  w.writeString("code");
  w.writeString(code);
  if (hasMessage) {
    w.writeString("message");
    w.writeString(message);
  }
}

// Pieces of {"ok": true, "value": ..., "stop": true} as raw bytes.
const VALUE_PREFIX = memory.data<u8>([
  0x82, 0xa2, 0x6f, 0x6b, 0xc3, 0xa5, 0x76, 0x61, 0x6c, 0x75, 0x65]); // {"ok":true,"value":
const OK_ONLY = memory.data<u8>([0x81, 0xa2, 0x6f, 0x6b, 0xc3]); // {"ok":true}
const STOP_ONLY = memory.data<u8>([
  0x82, 0xa2, 0x6f, 0x6b, 0xc3, 0xa4, 0x73, 0x74, 0x6f, 0x70, 0xc3]); // {"ok":true,"stop":true}
const STOP_TAIL = memory.data<u8>([0xa4, 0x73, 0x74, 0x6f, 0x70, 0xc3]); // "stop":true

function writeFixed(bytes: usize, len: u32): void {
  output.hidePrefix(false);
  output.reset();
  output.writeRawPtr(bytes, len);
}

/** Does `pattern` (exact, or a prefix ending in '*') match the subject? */
function patternMatches(pattern: string, subject: Bytes): bool {
  const n = pattern.length;
  if (n > 0 && pattern.charCodeAt(n - 1) == 0x2a) {
    const prefix = Bytes.fromString(pattern.substring(0, n - 1));
    return subject.length >= prefix.length &&
      memory.compare(subject.ptr, prefix.ptr, <usize>prefix.length) == 0;
  }
  return subject.equals(pattern);
}

/** The data's "tag" (on_tag) or "name" (output extensions), for patterns. */
function subjectOf(data: Reader): Bytes | null {
  let f = data.find("tag");
  if (f === null) f = data.find("name");
  if (f === null) return null;
  const s = f.readStr();
  return f.ok ? s : null;
}

/** The hook entry for this call: the first with the name whose pattern (if
 * any) matches the data's subject. */
function findHook(namePtr: usize, nameLen: u32, data: Reader): Hook | null {
  const hooks = plugin.hooks;
  let subject: Bytes | null = null;
  let subjectRead = false;
  for (let i = 0; i < hooks.length; i++) {
    const h = hooks[i];
    if (!utf8Equals(namePtr, nameLen, h.name)) continue;
    const pattern = h.pattern;
    if (pattern === null) return h;
    if (!subjectRead) {
      subject = subjectOf(data);
      subjectRead = true;
    }
    if (subject !== null && patternMatches(pattern, subject)) return h;
  }
  return null;
}

const NIL_BYTE = memory.data<u8>([0xc0]);
const theData = Reader.nil();
const theCall = new Call("", theData, null, output);

// @ts-ignore: decorator
@inline
function spanReader(span: u64): Reader {
  return new Reader(<usize>(span >>> 32), <usize>(span & 0xffffffff));
}

export function call(ptr: usize, len: u32): u64 {
  // One pass checks the request (bounds, depth, string keys, no trailing
  // bytes) and finds its three keys.
  const rc = scanMap3(ptr, <usize>len, "hook", "data", "meta");
  if (rc != MsgpackError.OK && rc != MsgpackError.TYPE) {
    writeFailure(ErrorCode.INVALID, rc == MsgpackError.DEPTH
      ? "call request nests too deep" : "call request is not valid MessagePack");
    return finish();
  }
  const hookSpan = span0;
  const dataSpan = span1;
  const metaSpan = span2;
  let namePtr: usize = 0;
  let nameLen: u32 = 0;
  if (rc == MsgpackError.OK && hookSpan != 0) {
    const r = spanReader(hookSpan);
    if (r.next() == Type.STR) {
      namePtr = r.dataPtr;
      nameLen = r.dataLength;
    }
  }
  if (namePtr == 0) {
    writeFailure(ErrorCode.INVALID, "call request is not a map with a string \"hook\"");
    return finish();
  }
  const data = theData;
  if (dataSpan != 0) data.reposition(<usize>(dataSpan >>> 32), <usize>(dataSpan & 0xffffffff));
  else data.reposition(NIL_BYTE, 1);
  const hook = findHook(namePtr, nameLen, data);
  if (hook === null) {
    writeFailure(ErrorCode.UNHANDLED,
      "no handler for hook '" + String.UTF8.decodeUnsafe(namePtr, <usize>nameLen) + "'");
    return finish();
  }
  const handler = hook.handler;
  if (handler === null) {
    writeFixed(OK_ONLY, 5);
    return finish();
  }
  const w = output;
  w.hidePrefix(false);
  w.reset();
  w.writeRawPtr(VALUE_PREFIX, 11);
  w.hidePrefix(true);
  // One Call (and data reader) serves every call: a handler must not keep them.
  const c = theCall;
  c.hook = hook.name;
  c.data = data;
  c.meta = metaSpan != 0 ? spanReader(metaSpan) : null;
  c.failed = false;
  c.failCode = "";
  c.failMessage = "";
  respond(c, handler(c));
  return finish();
}

/** Turns the handler's verdict into the response in `output`. */
function respond(c: Call, reply: Reply): void {
  const w = output;
  if (c.failed) {
    writeFailure(c.failCode, c.failMessage);
    return;
  }
  const valueLen = w.length;
  if (reply == Reply.UNCHANGED) {
    writeFixed(OK_ONLY, 5);
    return;
  }
  if (reply != Reply.VALUE && reply != Reply.STOP) {
    writeFailure(ErrorCode.FAILED, "handler returned Reply.FAILED without call.fail()");
    return;
  }
  // The value sits one level below the response map.
  if (valueLen > 0 && validate(w.dataStart, <usize>valueLen, MAX_DEPTH - 1) != MsgpackError.OK) {
    // Typically an array or map count the items written do not match.
    writeFailure(ErrorCode.FAILED, "handler wrote a malformed value (not exactly one value)");
    return;
  }
  if (valueLen == 0) {
    if (reply == Reply.VALUE) {
      writeFailure(ErrorCode.FAILED, "handler returned Reply.VALUE but wrote no value");
    } else {
      writeFixed(STOP_ONLY, 11);
    }
    return;
  }
  w.hidePrefix(false);
  if (reply == Reply.STOP) {
    store<u8>(w.fullStart, 0x83); // one more pair in the fixmap
    w.writeRawPtr(STOP_TAIL, 6);
  }
}
