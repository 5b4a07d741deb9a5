// The ABI exports (SPEC 1.1). A plugin's entry file re-exports them with
//   export * from "@wasmext/as-sdk/exports";
// and AssemblyScript exports them from the module under exactly these names.

import { ABI_MAJOR } from "./assembly/abi";
import { allocForHost, freeForHost } from "./assembly/host";
import { call, register } from "./assembly/plugin";

/** The major ABI version this guest was built for. */
export function wasmext_abi_version(): i32 {
  return ABI_MAJOR;
}

/** `size` bytes for the host to write into, aligned to 8 (16 in fact). */
export function wasmext_alloc(size: u32): usize {
  return allocForHost(size);
}

/** Gives back a region the host got from wasmext_alloc. */
export function wasmext_free(ptr: usize, size: u32): void {
  freeForHost(ptr, size);
}

/** Registration request in, registration map out (packed ptr << 32 | len). */
export function wasmext_register(ptr: usize, len: u32): u64 {
  return register(ptr, len);
}

/** One hook call: request in, response out (packed ptr << 32 | len). */
export function wasmext_call(ptr: usize, len: u32): u64 {
  return call(ptr, len);
}
