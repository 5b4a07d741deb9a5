// The ABI v1 MessagePack codec for JavaScript guests (abi/vectors/msgpack.json is
// the contract): smallest encodings, floats as float64, Uint8Array as bin, BigInt
// for 64-bit integers beyond Number's safe range. `unpack` refuses truncation,
// trailing bytes, ext types, invalid UTF-8 and nesting deeper than maxDepth.
//
// Inside a component the engine interprets this code (no JIT), where every call
// costs: short strings are encoded straight into the output, and the reader reads
// a byte and a short str (nearly every map key) in place rather than through its
// helper methods.

export const MAX_DEPTH = 64;

export class MsgpackError extends Error {}

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

class Writer {
  constructor() { this.buf = new Uint8Array(256); this.len = 0; }
  room(n) {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
  }
  byte(b) { this.room(1); this.buf[this.len++] = b; }
  bytes(src) { this.room(src.length); this.buf.set(src, this.len); this.len += src.length; }
  uint(n, width) {
    this.room(width);
    for (let i = width - 1; i >= 0; i--) { this.buf[this.len + i] = n & 0xff; n = Math.floor(n / 256); }
    this.len += width;
  }
  big(n, signed) {
    this.room(8);
    const view = new DataView(this.buf.buffer, this.buf.byteOffset + this.len, 8);
    if (signed) view.setBigInt64(0, n); else view.setBigUint64(0, n);
    this.len += 8;
  }
  result() { return this.buf.slice(0, this.len); }
}

function packInt(w, n) {
  if (n >= 0) {
    if (n <= 0x7f) w.byte(n);
    else if (n <= 0xff) { w.byte(0xcc); w.uint(n, 1); }
    else if (n <= 0xffff) { w.byte(0xcd); w.uint(n, 2); }
    else if (n <= 0xffffffff) { w.byte(0xce); w.uint(n, 4); }
    else { w.byte(0xcf); w.big(BigInt(n), false); }
  } else if (n >= -32) w.byte(n & 0xff);
  else if (n >= -0x80) { w.byte(0xd0); w.uint(n & 0xff, 1); }
  else if (n >= -0x8000) { w.byte(0xd1); w.uint(n & 0xffff, 2); }
  else if (n >= -0x80000000) { w.byte(0xd2); w.uint((n >>> 0), 4); }
  else { w.byte(0xd3); w.big(BigInt(n), true); }
}

function packBig(w, n) {
  if (n >= -(2n ** 53n) && n <= 2n ** 53n) return packInt(w, Number(n));
  if (n > 0n) {
    if (n >= 2n ** 64n) throw new MsgpackError(`int ${n} does not fit 64 bits`);
    w.byte(0xcf); w.big(n, false);
  } else {
    if (n < -(2n ** 63n)) throw new MsgpackError(`int ${n} does not fit 64 bits`);
    w.byte(0xd3); w.big(n, true);
  }
}

function packLen(w, n, fix, fixMax, b8, b16, b32) {
  if (n <= fixMax) w.byte(fix | n);
  else if (b8 !== null && n <= 0xff) { w.byte(b8); w.uint(n, 1); }
  else if (n <= 0xffff) { w.byte(b16); w.uint(n, 2); }
  else { w.byte(b32); w.uint(n, 4); }
}

function packValue(w, v, depth) {
  if (v === null || v === undefined) return w.byte(0xc0);
  if (v === true) return w.byte(0xc3);
  if (v === false) return w.byte(0xc2);
  if (typeof v === "number") {
    if (Number.isInteger(v) && Math.abs(v) <= Number.MAX_SAFE_INTEGER) return packInt(w, v);
    w.byte(0xcb); w.room(8);
    new DataView(w.buf.buffer, w.buf.byteOffset + w.len, 8).setFloat64(0, v);
    w.len += 8;
    return;
  }
  if (typeof v === "bigint") return packBig(w, v);
  if (typeof v === "string") {
    if (v.length <= 10) { // at most 30 UTF-8 bytes: a fixstr, its length known after
      w.room(31);
      const at = w.len;
      const { written } = utf8.encodeInto(v, w.buf.subarray(at + 1, at + 31));
      w.buf[at] = 0xa0 | written;
      w.len = at + 1 + written;
      return;
    }
    const raw = utf8.encode(v);
    packLen(w, raw.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
    return w.bytes(raw);
  }
  if (v instanceof Uint8Array) {
    packLen(w, v.length, 0, -1, 0xc4, 0xc5, 0xc6);
    return w.bytes(v);
  }
  if (depth >= MAX_DEPTH) throw new MsgpackError(`containers nested deeper than ${MAX_DEPTH}`);
  if (Array.isArray(v)) {
    packLen(w, v.length, 0x90, 15, null, 0xdc, 0xdd);
    for (const item of v) packValue(w, item, depth + 1);
    return;
  }
  if (v instanceof Map) {
    packLen(w, v.size, 0x80, 15, null, 0xde, 0xdf);
    for (const [k, item] of v) { packValue(w, k, depth + 1); packValue(w, item, depth + 1); }
    return;
  }
  if (typeof v === "object") {
    const keys = Object.keys(v);
    packLen(w, keys.length, 0x80, 15, null, 0xde, 0xdf);
    for (const k of keys) { packValue(w, k, depth + 1); packValue(w, v[k], depth + 1); }
    return;
  }
  throw new MsgpackError(`cannot encode a ${typeof v}`);
}

export function pack(value) {
  const w = new Writer();
  packValue(w, value, 0);
  return w.result();
}

// {"ok": true, "value": ...}: the head of nearly every call answer, written once.
const ANSWER_HEAD = new Uint8Array([0x82, 0xa2, 0x6f, 0x6b, 0xc3, 0xa5, 0x76, 0x61, 0x6c, 0x75, 0x65]);

// The bytes of pack({ ok: true, value }) without building that object.
export function packAnswer(value) {
  const w = new Writer();
  w.bytes(ANSWER_HEAD);
  packValue(w, value, 1); // inside the answer map, as pack() would write it
  return w.result();
}

class Reader {
  constructor(data, maxDepth) {
    this.data = data; this.pos = 0; this.maxDepth = maxDepth;
    this.view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  }
  need(n) { if (this.pos + n > this.data.length) throw new MsgpackError("truncated document"); }
  take(n) { this.need(n); const out = this.data.subarray(this.pos, this.pos + n); this.pos += n; return out; }
  uint(n) {
    this.need(n);
    let v = 0;
    for (let i = 0; i < n; i++) v = v * 256 + this.data[this.pos + i];
    this.pos += n;
    return v;
  }
  text(n) {
    if (n === 0) { return ""; }
    try { return utf8Strict.decode(this.take(n)); }
    catch (e) { if (e instanceof MsgpackError) throw e; throw new MsgpackError("a str that is not UTF-8"); }
  }
  int64(signed) {
    this.need(8);
    const big = signed ? this.view.getBigInt64(this.pos) : this.view.getBigUint64(this.pos);
    this.pos += 8;
    return big >= -(2n ** 53n) && big <= 2n ** 53n ? Number(big) : big;
  }
  nest(depth) { if (depth + 1 > this.maxDepth) throw new MsgpackError(`containers nested deeper than ${this.maxDepth}`); }
  array(n, depth) {
    this.nest(depth);
    const out = [];
    for (let i = 0; i < n; i++) out.push(this.value(depth + 1));
    return out;
  }
  map(n, depth) {
    this.nest(depth);
    const out = {};
    const data = this.data;
    for (let i = 0; i < n; i++) {
      const b = this.pos < data.length ? data[this.pos] : -1;
      let key;
      if (b >= 0xa0 && b <= 0xbf) { this.pos++; key = this.text(b & 0x1f); }
      else key = this.value(depth + 1);
      if (typeof key !== "string") throw new MsgpackError("a map key that is not a str");
      out[key] = this.value(depth + 1);
    }
    return out;
  }
  value(depth) {
    if (this.pos >= this.data.length) throw new MsgpackError("truncated document");
    const b = this.data[this.pos++];
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 0x100;
    if (b >= 0xa0 && b <= 0xbf) return this.text(b & 0x1f);
    if (b >= 0x90 && b <= 0x9f) return this.array(b & 0x0f, depth);
    if (b >= 0x80 && b <= 0x8f) return this.map(b & 0x0f, depth);
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xcc: return this.uint(1);
      case 0xcd: return this.uint(2);
      case 0xce: return this.uint(4);
      case 0xcf: return this.int64(false);
      case 0xd0: { const v = this.uint(1); return v >= 0x80 ? v - 0x100 : v; }
      case 0xd1: { const v = this.uint(2); return v >= 0x8000 ? v - 0x10000 : v; }
      case 0xd2: { const v = this.uint(4); return v >= 0x80000000 ? v - 0x100000000 : v; }
      case 0xd3: return this.int64(true);
      case 0xca: { this.need(4); const v = this.view.getFloat32(this.pos); this.pos += 4; return v; }
      case 0xcb: { this.need(8); const v = this.view.getFloat64(this.pos); this.pos += 8; return v; }
      case 0xd9: return this.text(this.uint(1));
      case 0xda: return this.text(this.uint(2));
      case 0xdb: return this.text(this.uint(4));
      case 0xc4: return this.take(this.uint(1)).slice();
      case 0xc5: return this.take(this.uint(2)).slice();
      case 0xc6: return this.take(this.uint(4)).slice();
      case 0xdc: return this.array(this.uint(2), depth);
      case 0xdd: return this.array(this.uint(4), depth);
      case 0xde: return this.map(this.uint(2), depth);
      case 0xdf: return this.map(this.uint(4), depth);
      default: throw new MsgpackError(`type byte 0x${b.toString(16)} is not part of ABI v1`);
    }
  }
}

export function unpack(data, maxDepth = MAX_DEPTH) {
  const reader = new Reader(data instanceof Uint8Array ? data : new Uint8Array(data), maxDepth);
  const value = reader.value(0);
  if (reader.pos !== reader.data.length) {
    throw new MsgpackError(`${reader.data.length - reader.pos} bytes after the value`);
  }
  return value;
}
