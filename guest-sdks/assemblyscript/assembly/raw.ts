// Layer 1, raw: the two imports exactly as SPEC 1.2 declares them, and the
// packed i64 of SPEC 1.3. Nothing here checks anything; the safe layer
// (msgpack.ts, host.ts) is built on it.

// @ts-ignore: decorator
@external("wasmext", "host_call")
/** One host service call: request map in, a region from wasmext_alloc with the answer out (0 = none). */
export declare function host_call(ptr: usize, len: u32): u64;

// @ts-ignore: decorator
@external("wasmext", "log")
/** Direct log of (level, UTF-8 text); the host copies the text. */
export declare function log(level: i32, ptr: usize, len: u32): void;

/** `(ptr << 32) | len`, the buffer handle of SPEC 1.3. */
// @ts-ignore: decorator
@inline
export function pack(ptr: usize, len: u32): u64 {
  return (<u64>ptr << 32) | <u64>len;
}

// @ts-ignore: decorator
@inline
export function packedPtr(packed: u64): usize {
  return <usize>(packed >>> 32);
}

// @ts-ignore: decorator
@inline
export function packedLen(packed: u64): u32 {
  return <u32>(packed & 0xffffffff);
}
