// An Extism plugin, written against @extism/as-pdk, that uses wasmext's host
// functions: a counter kept in plugin state, and a log line per call.
import { Host, Memory } from "@extism/as-pdk";

@external("extism:host/user", "wasmext_state_get")
declare function stateGet(key: u64): u64;
@external("extism:host/user", "wasmext_state_set")
declare function stateSet(key: u64, value: u64): void;
@external("extism:host/user", "wasmext_log")
declare function wasmextLog(text: u64): void;
@external("extism:host/env", "length")
declare function blockLength(offset: u64): u64;

// The Extism kernel has no abort import: a failed assertion just traps.
export function onAbort(message: string | null, file: string | null, line: u32, column: u32): void {
  unreachable();
}

// count: input is a counter name; output is its new value (JSON number).
export function count(): i32 {
  const name = Host.inputString();
  const key = Memory.allocateString(name);
  const found = stateGet(key.offset);
  const text = found == 0 ? "null" : new Memory(found, blockLength(found)).toString();
  const next = (text == "null" ? 0 : I32.parseInt(text)) + 1;
  stateSet(key.offset, Memory.allocateString(next.toString()).offset);
  wasmextLog(Memory.allocateString("counter " + name + " is now " + next.toString()).offset);
  Host.outputString(next.toString());
  return 0;
}
