// Layer 2, safe: a bounds-checked MessagePack reader and a growable writer
// that always picks the smallest encoding (SPEC 2; the bytes equal
// abi/vectors/msgpack.json).
//
// The reader never reads past its end: every declared length is compared
// with the bytes left before anything is read (array and map counts too, so
// a header announcing 4 billion items costs nothing), ext types and 0xc1 are
// refused, and nesting is tracked in a fixed table, never by recursion, up
// to MAX_DEPTH (64) containers.

import { Limits } from "./abi";

/** Containers may nest this deep (max_msgpack_depth): 64 are accepted, the 65th is not. */
export const MAX_DEPTH: i32 = Limits.MAX_MSGPACK_DEPTH;

/** Why a read failed. The reader keeps the first one (see Reader.err). */
export enum MsgpackError {
  OK = 0,
  /** A value runs past the end of its buffer (or the buffer is empty). */
  TRUNCATED = -1,
  /** The next value is not of the type asked for. */
  TYPE = -2,
  /** A number does not fit the type asked for. */
  RANGE = -3,
  /** Nesting deeper than MAX_DEPTH. */
  DEPTH = -4,
  /** Ext type, byte 0xc1, a non-string map key, trailing bytes, bad UTF-8 (when checked). */
  MALFORMED = -5,
  /** A map key that is not there. */
  NOT_FOUND = -7,
}

/** The kind of one MessagePack token. */
export enum Type {
  NIL,
  BOOL,
  /** Any integer that fits an i64. */
  INT,
  /** An unsigned integer above i64.MAX_VALUE. */
  UINT,
  /** float32 or float64 (widened to f64). */
  FLOAT,
  STR,
  BIN,
  /** Header only: `count` items follow. */
  ARRAY,
  /** Header only: `count` key/value pairs follow. */
  MAP,
  /** Not a value: end of input or a malformed byte. */
  INVALID,
}

// ---------------------------------------------------------------------------
// Byte views

/** A view of bytes in linear memory: `length` bytes at `ptr`.
 *
 * `owner`, when set, is the managed buffer the bytes live in and keeps it
 * alive. Views of a call's request (Call.data and everything read from it)
 * have no owner: the host keeps that region, and it is valid only until the
 * handler returns. Copy what you keep (`toString`, `toUint8Array`). */
export class Bytes {
  constructor(public ptr: usize, public length: i32, public owner: ArrayBuffer | null = null) {}

  /** The UTF-8 encoding of `s` (lone surrogates become U+FFFD). */
  static fromString(s: string): Bytes {
    const buf = String.UTF8.encode(s, false, String.UTF8.ErrorMode.REPLACE);
    return new Bytes(changetype<usize>(buf), buf.byteLength, buf);
  }

  /** A view of the array's bytes (no copy). */
  static fromUint8Array(a: Uint8Array): Bytes {
    return new Bytes(a.dataStart, a.length, a.buffer);
  }

  static fromArrayBuffer(b: ArrayBuffer): Bytes {
    return new Bytes(changetype<usize>(b), b.byteLength, b);
  }

  /** The bytes decoded as UTF-8 into a new string. */
  toString(): string {
    return String.UTF8.decodeUnsafe(this.ptr, <usize>this.length);
  }

  /** A copy of the bytes. */
  toUint8Array(): Uint8Array {
    const a = new Uint8Array(this.length);
    memory.copy(a.dataStart, this.ptr, <usize>this.length);
    return a;
  }

  /** Byte `i` (bounds-checked: aborts outside 0..length-1). */
  at(i: i32): u8 {
    if (<u32>i >= <u32>this.length) throw new RangeError("Bytes index out of range");
    return load<u8>(this.ptr + <usize>i);
  }

  /** Do these bytes equal the UTF-8 encoding of `s`? Allocates nothing. */
  equals(s: string): bool {
    return utf8Equals(this.ptr, <u32>this.length, s);
  }

  equalsBytes(other: Bytes): bool {
    return this.length == other.length &&
      memory.compare(this.ptr, other.ptr, <usize>this.length) == 0;
  }
}

/** Do the `len` bytes at `ptr` equal the UTF-8 encoding of `s`? */
export function utf8Equals(ptr: usize, len: u32, s: string): bool {
  const n = s.length;
  const sp = changetype<usize>(s);
  // ASCII fast path: one byte per UTF-16 unit.
  if (<u32>n == len) {
    let i = 0;
    for (; i < n; i++) {
      const c = <u32>load<u16>(sp + (<usize>i << 1));
      if (c >= 0x80) break;
      if (<u32>load<u8>(ptr + <usize>i) != c) return false;
    }
    if (i == n) return true;
  }
  if (<i32>len < n || <u32>String.UTF8.byteLength(s) != len) return false;
  const tmp = String.UTF8.encode(s, false, String.UTF8.ErrorMode.REPLACE);
  return memory.compare(ptr, changetype<usize>(tmp), <usize>len) == 0;
}

/** Is the text valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF)? */
export function utf8Valid(ptr: usize, len: usize): bool {
  const end = ptr + len;
  let p = ptr;
  while (p < end) {
    // Eight ASCII bytes at a time.
    if (end - p >= 8 && (load<u64>(p) & 0x8080808080808080) == 0) {
      p += 8;
      continue;
    }
    const b0 = <u32>load<u8>(p);
    if (b0 < 0x80) {
      p++;
      continue;
    }
    let need: usize;
    let lo: u32 = 0x80;
    let hi: u32 = 0xbf;
    if (b0 >= 0xc2 && b0 <= 0xdf) {
      need = 1;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
      need = 2;
      if (b0 == 0xe0) lo = 0xa0; // overlong
      else if (b0 == 0xed) hi = 0x9f; // surrogates
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      need = 3;
      if (b0 == 0xf0) lo = 0x90; // overlong
      else if (b0 == 0xf4) hi = 0x8f; // above U+10FFFF
    } else {
      return false;
    }
    if (end - p <= need) return false;
    const b1 = <u32>load<u8>(p, 1);
    if (b1 < lo || b1 > hi) return false;
    for (let i: usize = 2; i <= need; i++) {
      const b = <u32>load<u8>(p + i);
      if ((b & 0xc0) != 0x80) return false;
    }
    p += need + 1;
  }
  return true;
}

// ---------------------------------------------------------------------------
// One token

// The token `decode` read last. Module globals, not an object, so that
// reading allocates nothing; nothing in here is re-entered.
let tType: Type = Type.NIL;
let tInt: i64 = 0; // INT value, UINT bits, BOOL as 0/1
let tFloat: f64 = 0;
let tPtr: usize = 0; // STR/BIN payload
let tLen: u32 = 0; // STR/BIN byte length, ARRAY/MAP count
let tErr: MsgpackError = MsgpackError.OK;

// @ts-ignore: decorator
@inline
function be16(p: usize): u32 {
  return <u32>bswap<u16>(load<u16>(p));
}

// @ts-ignore: decorator
@inline
function be32(p: usize): u32 {
  return bswap<u32>(load<u32>(p));
}

// @ts-ignore: decorator
@inline
function be64(p: usize): u64 {
  return bswap<u64>(load<u64>(p));
}

function fail(e: MsgpackError): usize {
  tErr = e;
  return 0;
}

/** Payload of `n` bytes after a header of `h` bytes at p (STR/BIN). */
function payload(p: usize, end: usize, h: usize, n: u32, t: Type): usize {
  const start = p + h;
  if (<u64>n > <u64>(end - start)) return fail(MsgpackError.TRUNCATED);
  tType = t;
  tPtr = start;
  tLen = n;
  return start + <usize>n;
}

/** A container header of `h` bytes at p announcing `n` items (pairs for maps). */
function container(p: usize, end: usize, h: usize, n: u32, t: Type): usize {
  const start = p + h;
  // Every item takes at least one byte: more items than bytes left is a lie.
  const items: u64 = t == Type.MAP ? <u64>n << 1 : <u64>n;
  if (items > <u64>(end - start)) return fail(MsgpackError.TRUNCATED);
  tType = t;
  tLen = n;
  return start;
}

/** Decodes the token at p (p < end is not required) into the t* globals.
 * Returns the position after its header (after the payload for STR/BIN),
 * or 0 with tErr set. `p` is never 0 for memory this SDK hands out. */
function decode(p: usize, end: usize): usize {
  if (p >= end) return fail(MsgpackError.TRUNCATED);
  const left = end - p;
  const b = <u32>load<u8>(p);
  if (b < 0x80) {
    tType = Type.INT;
    tInt = <i64>b;
    return p + 1;
  }
  if (b >= 0xe0) {
    tType = Type.INT;
    tInt = <i64><i8>b;
    return p + 1;
  }
  if (b < 0x90) return container(p, end, 1, b & 0x0f, Type.MAP);
  if (b < 0xa0) return container(p, end, 1, b & 0x0f, Type.ARRAY);
  if (b < 0xc0) return payload(p, end, 1, b & 0x1f, Type.STR);
  // 0xc0..0xdf: the header byte says how many bytes follow.
  let need: usize = 0;
  switch (b) {
    case 0xc4: case 0xcc: case 0xd0: case 0xd9: need = 1; break;
    case 0xc5: case 0xcd: case 0xd1: case 0xda: case 0xdc: case 0xde: need = 2; break;
    case 0xc6: case 0xca: case 0xce: case 0xd2: case 0xdb: case 0xdd: case 0xdf: need = 4; break;
    case 0xcb: case 0xcf: case 0xd3: need = 8; break;
    default: break;
  }
  if (need != 0 && left <= need) return fail(MsgpackError.TRUNCATED);
  const q = p + 1;
  switch (b) {
    case 0xc0: tType = Type.NIL; return q;
    case 0xc2: tType = Type.BOOL; tInt = 0; return q;
    case 0xc3: tType = Type.BOOL; tInt = 1; return q;
    case 0xc4: return payload(p, end, 2, <u32>load<u8>(q), Type.BIN);
    case 0xc5: return payload(p, end, 3, be16(q), Type.BIN);
    case 0xc6: return payload(p, end, 5, be32(q), Type.BIN);
    case 0xca: tType = Type.FLOAT; tFloat = <f64>reinterpret<f32>(be32(q)); return q + 4;
    case 0xcb: tType = Type.FLOAT; tFloat = reinterpret<f64>(be64(q)); return q + 8;
    case 0xcc: tType = Type.INT; tInt = <i64>load<u8>(q); return q + 1;
    case 0xcd: tType = Type.INT; tInt = <i64>be16(q); return q + 2;
    case 0xce: tType = Type.INT; tInt = <i64>be32(q); return q + 4;
    case 0xcf: {
      const v = be64(q);
      tType = <i64>v < 0 ? Type.UINT : Type.INT;
      tInt = <i64>v;
      return q + 8;
    }
    case 0xd0: tType = Type.INT; tInt = <i64>load<i8>(q); return q + 1;
    case 0xd1: tType = Type.INT; tInt = <i64><i16>be16(q); return q + 2;
    case 0xd2: tType = Type.INT; tInt = <i64><i32>be32(q); return q + 4;
    case 0xd3: tType = Type.INT; tInt = <i64>be64(q); return q + 8;
    case 0xd9: return payload(p, end, 2, <u32>load<u8>(q), Type.STR);
    case 0xda: return payload(p, end, 3, be16(q), Type.STR);
    case 0xdb: return payload(p, end, 5, be32(q), Type.STR);
    case 0xdc: return container(p, end, 3, be16(q), Type.ARRAY);
    case 0xdd: return container(p, end, 5, be32(q), Type.ARRAY);
    case 0xde: return container(p, end, 3, be16(q), Type.MAP);
    case 0xdf: return container(p, end, 5, be32(q), Type.MAP);
    default: return fail(MsgpackError.MALFORMED); // 0xc1, ext and fixext
  }
}

// ---------------------------------------------------------------------------
// Whole values, iteratively

// Open containers: items left (u32) and whether it is a map (u32), per level.
const FRAMES: usize = memory.data((MAX_DEPTH + 1) * 8);

/** Passes over one complete value at p: checks it (bounds, depth within
 * `maxDepth`, string map keys, UTF-8 when `utf8`) and re-encodes it into `w`
 * when given. Returns the end of the value, or 0 with tErr set. */
function walk(p: usize, end: usize, maxDepth: i32, utf8: bool, w: Writer | null): usize {
  let depth: i32 = 0;
  let left: u32 = 1;
  let inMap = false;
  while (true) {
    if (left == 0) {
      if (depth == 0) return p;
      depth--;
      const f = FRAMES + (<usize>depth << 3);
      left = load<u32>(f);
      inMap = load<u32>(f, 4) != 0;
      continue;
    }
    const isKey = inMap && (left & 1) == 0;
    left--;
    const q = decode(p, end);
    if (q == 0) return 0;
    const t = tType;
    if (isKey && t != Type.STR) return fail(MsgpackError.MALFORMED);
    if (t == Type.ARRAY || t == Type.MAP) {
      if (depth >= maxDepth) return fail(MsgpackError.DEPTH);
      const f = FRAMES + (<usize>depth << 3);
      store<u32>(f, left);
      store<u32>(f, inMap ? 1 : 0, 4);
      depth++;
      inMap = t == Type.MAP;
      left = inMap ? tLen << 1 : tLen;
    } else if (utf8 && t == Type.STR && !utf8Valid(tPtr, <usize>tLen)) {
      return fail(MsgpackError.MALFORMED);
    }
    if (w !== null) emitToken(w);
    p = q;
  }
}

/** Is `len` bytes at `ptr` exactly one well-formed value: in bounds, depth
 * within MAX_DEPTH, no ext types, string map keys, no trailing bytes?
 * Returns MsgpackError.OK or the reason. UTF-8 is not checked (the host only
 * sends valid text); use validateUtf8 for bytes of other origin. */
export function validate(ptr: usize, len: usize, maxDepth: i32 = MAX_DEPTH): MsgpackError {
  return check(ptr, len, maxDepth, false);
}

/** validate, and every string is valid UTF-8. */
export function validateUtf8(ptr: usize, len: usize, maxDepth: i32 = MAX_DEPTH): MsgpackError {
  return check(ptr, len, maxDepth, true);
}

function check(ptr: usize, len: usize, maxDepth: i32, utf8: bool): MsgpackError {
  const end = ptr + len;
  const q = walk(ptr, end, maxDepth, utf8, null);
  if (q == 0) return tErr;
  return q == end ? MsgpackError.OK : MsgpackError.MALFORMED;
}

/** SDK use: checks the map at [ptr, ptr+len) as `validate` does and, in the
 * same pass, finds the values of three keys: `(start << 32) | length` in
 * span0..span2, 0 when absent. Returns OK, TYPE when the document is not a
 * map, or why it is malformed. */
export let span0: u64 = 0;
export let span1: u64 = 0;
export let span2: u64 = 0;

export function scanMap3(ptr: usize, len: usize, k0: string, k1: string, k2: string): MsgpackError {
  span0 = 0;
  span1 = 0;
  span2 = 0;
  const end = ptr + len;
  let p = decode(ptr, end);
  if (p == 0) return tErr;
  if (tType != Type.MAP) return walk(ptr, end, MAX_DEPTH, false, null) == 0 ? tErr : MsgpackError.TYPE;
  let pairs = tLen;
  while (pairs-- > 0) {
    const k = decode(p, end);
    if (k == 0) return tErr;
    if (tType != Type.STR) return MsgpackError.MALFORMED;
    const kp = tPtr;
    const kl = tLen;
    const v = walk(k, end, MAX_DEPTH - 1, false, null);
    if (v == 0) return tErr;
    const span = (<u64>k << 32) | <u64>(v - k);
    if (span0 == 0 && utf8Equals(kp, kl, k0)) span0 = span;
    else if (span1 == 0 && utf8Equals(kp, kl, k1)) span1 = span;
    else if (span2 == 0 && utf8Equals(kp, kl, k2)) span2 = span;
    p = v;
  }
  return p == end ? MsgpackError.OK : MsgpackError.MALFORMED;
}

// ---------------------------------------------------------------------------
// Reader

const NIL_BYTE: usize = memory.data<u8>([0xc0]);

/** A pull reader over bytes it does not own (a cursor; `clone()` copies it).
 *
 * Errors are sticky: the first failed read sets `err`, leaves the position
 * where it was, and makes every later read return a zero value, so a whole
 * structure can be read and checked once (`ok`). Typed reads never convert
 * silently: a str is not an int, an int above i64 is RANGE for readInt. */
export class Reader {
  /** Where the next token starts. */
  pos: usize;
  /** The end of the readable bytes. */
  end: usize;
  /** The first error (MsgpackError.OK while none). */
  err: MsgpackError = MsgpackError.OK;
  /** Keeps a managed buffer alive while the reader uses it. */
  owner: ArrayBuffer | null;

  // The token `next()` read last.
  /** BOOL value. */
  boolValue: bool = false;
  /** INT value; for UINT the bits of the u64 (see uintValue). */
  intValue: i64 = 0;
  floatValue: f64 = 0;
  /** STR / BIN payload, a view into the buffer. */
  dataPtr: usize = 0;
  dataLength: u32 = 0;
  /** ARRAY item count or MAP pair count. */
  count: u32 = 0;

  constructor(ptr: usize, len: usize, owner: ArrayBuffer | null = null) {
    this.pos = ptr;
    this.end = ptr + len;
    this.owner = owner;
  }

  static fromBytes(b: Bytes): Reader {
    return new Reader(b.ptr, <usize>b.length, b.owner);
  }

  static fromUint8Array(a: Uint8Array): Reader {
    return new Reader(a.dataStart, <usize>a.length, a.buffer);
  }

  static fromArrayBuffer(b: ArrayBuffer): Reader {
    return new Reader(changetype<usize>(b), <usize>b.byteLength, b);
  }

  /** A reader on a single nil (what Call.data is when the request had none). */
  static nil(): Reader {
    return new Reader(NIL_BYTE, 1);
  }

  /** Points the reader at other bytes, clearing the error. */
  reposition(ptr: usize, len: usize, owner: ArrayBuffer | null = null): void {
    this.pos = ptr;
    this.end = ptr + len;
    this.owner = owner;
    this.err = MsgpackError.OK;
  }

  /** An independent cursor at the same position (the error is copied too). */
  clone(): Reader {
    const r = new Reader(this.pos, 0, this.owner);
    r.end = this.end;
    r.err = this.err;
    return r;
  }

  get ok(): bool {
    return this.err == MsgpackError.OK;
  }

  /** Forget the error (the position is where the failed read left it: unchanged). */
  clearError(): void {
    this.err = MsgpackError.OK;
  }

  get atEnd(): bool {
    return this.pos >= this.end;
  }

  /** The bytes not read yet. */
  get remaining(): usize {
    return this.pos < this.end ? this.end - this.pos : 0;
  }

  /** OK when every byte was read; MALFORMED (trailing bytes) otherwise. */
  finish(): bool {
    if (this.err == MsgpackError.OK && this.pos != this.end) this.err = MsgpackError.MALFORMED;
    return this.ok;
  }

  /** The type of the next token without reading it (INVALID at the end, on a
   * malformed byte, or after an error; never sets `err`). */
  peekType(): Type {
    if (this.err != MsgpackError.OK) return Type.INVALID;
    return decode(this.pos, this.end) == 0 ? Type.INVALID : tType;
  }

  /** Reads one token and returns its type; its value is in boolValue,
   * intValue / uintValue, floatValue, dataPtr + dataLength (str, bin) or
   * count (array, map: the items follow). INVALID on error. */
  next(): Type {
    if (this.err != MsgpackError.OK) return Type.INVALID;
    const q = decode(this.pos, this.end);
    if (q == 0) {
      this.err = tErr;
      return Type.INVALID;
    }
    this.pos = q;
    const t = tType;
    switch (t) {
      case Type.BOOL: this.boolValue = tInt != 0; break;
      case Type.INT: case Type.UINT: this.intValue = tInt; break;
      case Type.FLOAT: this.floatValue = tFloat; break;
      case Type.STR: case Type.BIN: this.dataPtr = tPtr; this.dataLength = tLen; break;
      case Type.ARRAY: case Type.MAP: this.count = tLen; break;
      default: break;
    }
    return t;
  }

  /** The last UINT token's value (any INT token's bits, too). */
  get uintValue(): u64 {
    return <u64>this.intValue;
  }

  /** Decodes the next token if it is `want` (else TYPE), returning 0 on error. */
  private take(want: Type): usize {
    if (this.err != MsgpackError.OK) return 0;
    const q = decode(this.pos, this.end);
    if (q == 0) {
      this.err = tErr;
      return 0;
    }
    if (tType != want) {
      this.err = MsgpackError.TYPE;
      return 0;
    }
    this.pos = q;
    return q;
  }

  /** True when a nil was read. */
  readNil(): bool {
    return this.take(Type.NIL) != 0;
  }

  readBool(): bool {
    return this.take(Type.BOOL) != 0 && tInt != 0;
  }

  /** Any integer that fits an i64 (RANGE above that, TYPE for non-integers). */
  readInt(): i64 {
    if (this.err != MsgpackError.OK) return 0;
    const q = decode(this.pos, this.end);
    if (q == 0) {
      this.err = tErr;
      return 0;
    }
    if (tType == Type.UINT) {
      this.err = MsgpackError.RANGE;
      return 0;
    }
    if (tType != Type.INT) {
      this.err = MsgpackError.TYPE;
      return 0;
    }
    this.pos = q;
    return tInt;
  }

  /** An integer in i32 range (RANGE outside it). */
  readI32(): i32 {
    const save = this.pos;
    const v = this.readInt();
    if (this.err == MsgpackError.OK && (v < <i64>i32.MIN_VALUE || v > <i64>i32.MAX_VALUE)) {
      this.pos = save;
      this.err = MsgpackError.RANGE;
      return 0;
    }
    return <i32>v;
  }

  /** Any non-negative integer (RANGE when negative). */
  readUint(): u64 {
    if (this.err != MsgpackError.OK) return 0;
    const q = decode(this.pos, this.end);
    if (q == 0) {
      this.err = tErr;
      return 0;
    }
    if (tType != Type.INT && tType != Type.UINT) {
      this.err = MsgpackError.TYPE;
      return 0;
    }
    if (tType == Type.INT && tInt < 0) {
      this.err = MsgpackError.RANGE;
      return 0;
    }
    this.pos = q;
    return <u64>tInt;
  }

  /** A float32 or float64, or an integer converted to f64. */
  readFloat(): f64 {
    if (this.err != MsgpackError.OK) return 0;
    const q = decode(this.pos, this.end);
    if (q == 0) {
      this.err = tErr;
      return 0;
    }
    let v: f64;
    if (tType == Type.FLOAT) v = tFloat;
    else if (tType == Type.INT) v = <f64>tInt;
    else if (tType == Type.UINT) v = <f64><u64>tInt;
    else {
      this.err = MsgpackError.TYPE;
      return 0;
    }
    this.pos = q;
    return v;
  }

  /** A str, decoded into a new string ("" on error). */
  readString(): string {
    if (this.take(Type.STR) == 0) return "";
    return String.UTF8.decodeUnsafe(tPtr, <usize>tLen);
  }

  /** A str as a view of its UTF-8 bytes (no copy). */
  readStr(): Bytes {
    if (this.take(Type.STR) == 0) return new Bytes(0, 0);
    return new Bytes(tPtr, <i32>tLen, this.owner);
  }

  /** A bin, copied. */
  readBin(): Uint8Array {
    if (this.take(Type.BIN) == 0) return new Uint8Array(0);
    const a = new Uint8Array(<i32>tLen);
    memory.copy(a.dataStart, tPtr, <usize>tLen);
    return a;
  }

  /** A bin as a view (no copy). */
  readBinBytes(): Bytes {
    if (this.take(Type.BIN) == 0) return new Bytes(0, 0);
    return new Bytes(tPtr, <i32>tLen, this.owner);
  }

  /** An array header: the item count (the items follow). */
  readArray(): u32 {
    return this.take(Type.ARRAY) != 0 ? tLen : 0;
  }

  /** A map header: the pair count (the pairs follow). */
  readMap(): u32 {
    return this.take(Type.MAP) != 0 ? tLen : 0;
  }

  /** Passes over one complete value (any nesting up to MAX_DEPTH). */
  skip(): bool {
    if (this.err != MsgpackError.OK) return false;
    const q = walk(this.pos, this.end, MAX_DEPTH, false, null);
    if (q == 0) {
      this.err = tErr;
      return false;
    }
    this.pos = q;
    return true;
  }

  /** Passes over one complete value and returns its encoded bytes. */
  readRaw(): Bytes {
    if (this.err != MsgpackError.OK) return new Bytes(0, 0);
    const start = this.pos;
    const q = walk(start, this.end, MAX_DEPTH, false, null);
    if (q == 0) {
      this.err = tErr;
      return new Bytes(0, 0);
    }
    this.pos = q;
    return new Bytes(start, <i32>(q - start), this.owner);
  }

  /** With the reader on a map: a reader on the value of `key`, or null when
   * the key is absent, the next value is not a map or is malformed. This
   * reader does not move. The returned reader spans exactly that value. */
  find(key: string): Reader | null {
    if (this.err != MsgpackError.OK) return null;
    let p = decode(this.pos, this.end);
    if (p == 0 || tType != Type.MAP) return null;
    const end = this.end;
    let pairs = tLen;
    while (pairs-- > 0) {
      const k = decode(p, end);
      if (k == 0 || tType != Type.STR) return null;
      const match = utf8Equals(tPtr, tLen, key);
      const v = walk(k, end, MAX_DEPTH, false, null);
      if (v == 0) return null;
      if (match) return new Reader(k, v - k, this.owner);
      p = v;
    }
    return null;
  }
}

// ---------------------------------------------------------------------------
// Writer

/** A growable MessagePack buffer. Every write picks the smallest encoding;
 * floats are always float64. Writes cannot fail (running out of memory
 * traps, which the host reports as MemoryLimitExceeded). A writer is also a
 * plain byte buffer (`appendString`, `writeRaw`). */
export class Writer {
  private buf: ArrayBuffer;
  private len: usize = 0;
  // Bytes before `base` are invisible and kept: the SDK writes the response
  // prefix there and hands handlers a writer that looks empty.
  private base: usize = 0;

  constructor(capacity: i32 = 256) {
    this.buf = new ArrayBuffer(capacity > 0 ? capacity : 16);
  }

  /** Bytes written so far. */
  get length(): i32 {
    return <i32>(this.len - this.base);
  }

  /** Where the bytes start (valid until the next write). */
  get dataStart(): usize {
    return changetype<usize>(this.buf) + this.base;
  }

  /** Empty it, keeping the memory. */
  reset(): void {
    this.len = this.base;
  }

  /** Cut back to `length` bytes (no-op when already shorter). */
  truncate(length: i32): void {
    if (length >= 0 && <usize>length < this.len - this.base) this.len = this.base + <usize>length;
  }

  /** A view of the bytes written (valid until the next write or reset). */
  bytes(): Bytes {
    return new Bytes(this.dataStart, this.length, this.buf);
  }

  /** A copy of the bytes written. */
  toUint8Array(): Uint8Array {
    const a = new Uint8Array(this.length);
    memory.copy(a.dataStart, this.dataStart, <usize>this.length);
    return a;
  }

  /** SDK use: hide (and keep) everything written so far, or (false) show it again. */
  hidePrefix(hide: bool): void {
    this.base = hide ? this.len : 0;
  }

  /** SDK use: the whole buffer, prefix included. */
  get fullStart(): usize {
    return changetype<usize>(this.buf);
  }

  get fullLength(): i32 {
    return <i32>this.len;
  }

  /** Room for `n` more bytes; returns where they go. */
  reserve(n: usize): usize {
    const need = this.len + n;
    let cap = <usize>this.buf.byteLength;
    if (need > cap) {
      if (need > <usize>0x3fff_0000) throw new RangeError("Writer: buffer over 1 GiB");
      cap = max(cap << 1, need);
      this.buf = changetype<ArrayBuffer>(__renew(changetype<usize>(this.buf), cap));
    }
    return changetype<usize>(this.buf) + this.len;
  }

  // @ts-ignore: decorator
  @inline
  private put1(b: u32): void {
    const p = this.reserve(1);
    store<u8>(p, <u8>b);
    this.len += 1;
  }

  private putHead16(tag: u32, v: u32): void {
    const p = this.reserve(3);
    store<u8>(p, <u8>tag);
    store<u16>(p, bswap<u16>(<u16>v), 1);
    this.len += 3;
  }

  private putHead32(tag: u32, v: u32): void {
    const p = this.reserve(5);
    store<u8>(p, <u8>tag);
    store<u32>(p, bswap<u32>(v), 1);
    this.len += 5;
  }

  private putHead64(tag: u32, v: u64): void {
    const p = this.reserve(9);
    store<u8>(p, <u8>tag);
    store<u64>(p, bswap<u64>(v), 1);
    this.len += 9;
  }

  private putHead8(tag: u32, v: u32): void {
    const p = this.reserve(2);
    store<u8>(p, <u8>tag);
    store<u8>(p, <u8>v, 1);
    this.len += 2;
  }

  writeNil(): void {
    this.put1(0xc0);
  }

  writeBool(v: bool): void {
    this.put1(v ? 0xc3 : 0xc2);
  }

  writeInt(v: i64): void {
    if (v >= 0) {
      this.writeUint(<u64>v);
    } else if (v >= -32) {
      this.put1(<u32>v & 0xff);
    } else if (v >= -128) {
      this.putHead8(0xd0, <u32>v & 0xff);
    } else if (v >= -32768) {
      this.putHead16(0xd1, <u32>v & 0xffff);
    } else if (v >= <i64>i32.MIN_VALUE) {
      this.putHead32(0xd2, <u32>v);
    } else {
      this.putHead64(0xd3, <u64>v);
    }
  }

  writeUint(v: u64): void {
    if (v < 0x80) this.put1(<u32>v);
    else if (v < 0x100) this.putHead8(0xcc, <u32>v);
    else if (v < 0x10000) this.putHead16(0xcd, <u32>v);
    else if (v < 0x1_0000_0000) this.putHead32(0xce, <u32>v);
    else this.putHead64(0xcf, v);
  }

  /** Always float64. */
  writeFloat(v: f64): void {
    this.putHead64(0xcb, reinterpret<u64>(v));
  }

  /** A str header announcing `n` bytes (write the bytes with writeRaw*). */
  writeStrHeader(n: u32): void {
    if (n < 32) this.put1(0xa0 | n);
    else if (n < 0x100) this.putHead8(0xd9, n);
    else if (n < 0x10000) this.putHead16(0xda, n);
    else this.putHead32(0xdb, n);
  }

  /** A bin header announcing `n` bytes. */
  writeBinHeader(n: u32): void {
    if (n < 0x100) this.putHead8(0xc4, n);
    else if (n < 0x10000) this.putHead16(0xc5, n);
    else this.putHead32(0xc6, n);
  }

  /** A string, UTF-8 encoded (a lone surrogate becomes U+FFFD, so the host
   * always gets valid UTF-8). */
  writeString(s: string): void {
    const n = <u32>String.UTF8.byteLength(s);
    this.writeStrHeader(n);
    this.appendString(s, n);
  }

  /** A str from UTF-8 bytes (the caller vouches they are UTF-8). */
  writeStr(b: Bytes): void {
    this.writeStrRaw(b.ptr, <u32>b.length);
  }

  writeStrRaw(ptr: usize, len: u32): void {
    this.writeStrHeader(len);
    this.writeRawPtr(ptr, len);
  }

  writeBin(a: Uint8Array): void {
    this.writeBinRaw(a.dataStart, <u32>a.length);
  }

  writeBinBytes(b: Bytes): void {
    this.writeBinRaw(b.ptr, <u32>b.length);
  }

  writeBinRaw(ptr: usize, len: u32): void {
    this.writeBinHeader(len);
    this.writeRawPtr(ptr, len);
  }

  /** An array header: write `count` values after it. */
  writeArray(count: u32): void {
    if (count < 16) this.put1(0x90 | count);
    else if (count < 0x10000) this.putHead16(0xdc, count);
    else this.putHead32(0xdd, count);
  }

  /** A map header: write `count` key/value pairs after it. */
  writeMap(count: u32): void {
    if (count < 16) this.put1(0x80 | count);
    else if (count < 0x10000) this.putHead16(0xde, count);
    else this.putHead32(0xdf, count);
  }

  /** Bytes as they are: an already encoded value, or text when the writer
   * is used as a byte buffer. */
  writeRaw(b: Bytes): void {
    this.writeRawPtr(b.ptr, <u32>b.length);
  }

  writeRawPtr(ptr: usize, len: u32): void {
    if (len == 0) return;
    const p = this.reserve(<usize>len);
    memory.copy(p, ptr, <usize>len);
    this.len += <usize>len;
  }

  /** The UTF-8 bytes of `s` without any header (text building). `byteLength`
   * may be passed when already known. */
  appendString(s: string, byteLength: u32 = u32.MAX_VALUE): void {
    const n = byteLength == u32.MAX_VALUE ? <u32>String.UTF8.byteLength(s) : byteLength;
    const p = this.reserve(<usize>n);
    String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, p, false,
      String.UTF8.ErrorMode.REPLACE);
    this.len += <usize>n;
  }

  /** Decodes one value from `r` and writes it again, token by token: a
   * canonical copy, not a byte copy. Advances `r`; on error returns false,
   * sets r.err and writes nothing. */
  copyValue(r: Reader): bool {
    if (r.err != MsgpackError.OK) return false;
    const start = this.len;
    const q = walk(r.pos, r.end, MAX_DEPTH, false, this);
    if (q == 0) {
      this.len = start;
      r.err = tErr;
      return false;
    }
    r.pos = q;
    return true;
  }
}

/** Writes the token `decode` read last (copyValue's inner step). */
function emitToken(w: Writer): void {
  switch (tType) {
    case Type.NIL: w.writeNil(); break;
    case Type.BOOL: w.writeBool(tInt != 0); break;
    case Type.INT: w.writeInt(tInt); break;
    case Type.UINT: w.writeUint(<u64>tInt); break;
    case Type.FLOAT: w.writeFloat(tFloat); break;
    case Type.STR: w.writeStrRaw(tPtr, tLen); break;
    case Type.BIN: w.writeBinRaw(tPtr, tLen); break;
    case Type.ARRAY: w.writeArray(tLen); break;
    case Type.MAP: w.writeMap(tLen); break;
    default: break;
  }
}
