// Conformance behaviours for the Extism backend: the same hooks as the SDK
// conformance plugins where Extism can express them.
import { Config, Host, Memory } from "@extism/as-pdk";

@external("extism:host/user", "wasmext_host_call")
declare function hostCall(request: u64): u64;
@external("extism:host/user", "wasmext_log")
declare function wasmextLog(text: u64): void;
@external("extism:host/env", "length")
declare function blockLength(offset: u64): u64;

export function onAbort(message: string | null, file: string | null, line: u32, column: u32): void {
  unreachable();
}

// echo: the input bytes, unchanged.
export function echo(): i32 {
  Host.output(Host.input());
  return 0;
}

// log: the input text as a log line; no output.
export function log(): i32 {
  wasmextLog(Memory.allocateBytes(Host.input()).offset);
  return 0;
}

// host: the input is a MessagePack host_call request; the output is the answer.
export function host(): i32 {
  const answer = hostCall(Memory.allocateBytes(Host.input()).offset);
  Host.output(new Memory(answer, blockLength(answer)).toUint8Array());
  return 0;
}

// config: the input names a setting; the output is its value, or nothing.
export function config(): i32 {
  const value = Config.get(Host.inputString());
  Host.outputString(value === null ? "" : value);
  return 0;
}

// fail: a trap.
export function fail(): i32 {
  unreachable();
  return 1;
}
