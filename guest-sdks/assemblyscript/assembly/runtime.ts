// Replacements for the environment functions AssemblyScript would otherwise
// import from "env" (abort, trace, seed, console), which the wasmext host
// refuses. The build passes `--use abort=...` (and trace, seed, console) so
// that the compiler calls these instead.

import { LogLevel } from "./abi";
import * as raw from "./raw";

// The abort message is assembled here, without allocating: abort also runs
// when the heap is in trouble.
const ABORT_CAP: usize = 1024;
const abortBuf: usize = memory.data(<i32>ABORT_CAP);

function put(at: usize, s: string | null): usize {
  if (s === null) return at;
  const n = s.length;
  const sp = changetype<usize>(s);
  for (let i = 0; i < n && at + 4 <= ABORT_CAP; i++) {
    let c = <u32>load<u16>(sp + (<usize>i << 1));
    if (c >= 0xd800 && c < 0xe000) c = 0xfffd; // no surrogate pairs here: keep it simple
    if (c < 0x80) {
      store<u8>(abortBuf + at++, <u8>c);
    } else if (c < 0x800) {
      store<u8>(abortBuf + at++, <u8>(0xc0 | (c >> 6)));
      store<u8>(abortBuf + at++, <u8>(0x80 | (c & 0x3f)));
    } else {
      store<u8>(abortBuf + at++, <u8>(0xe0 | (c >> 12)));
      store<u8>(abortBuf + at++, <u8>(0x80 | ((c >> 6) & 0x3f)));
      store<u8>(abortBuf + at++, <u8>(0x80 | (c & 0x3f)));
    }
  }
  return at;
}

function putNumber(at: usize, v: u32): usize {
  let digits: u32 = 1;
  for (let t = v; t >= 10; t /= 10) digits++;
  if (at + <usize>digits > ABORT_CAP) return at;
  let p = at + <usize>digits;
  do {
    store<u8>(abortBuf + --p, <u8>(0x30 + v % 10));
    v /= 10;
  } while (v != 0);
  return at + <usize>digits;
}

/** `abort` for wasmext plugins: logs "abort: <message> (<file>:<line>:<column>)"
 * at error level through the `log` import, then traps. The host ends the call
 * with GuestTrap and discards the instance. */
export function wasmextAbort(message: string | null = null, fileName: string | null = null,
  line: u32 = 0, column: u32 = 0): void {
  let at = put(0, "abort: ");
  at = put(at, message !== null ? message : "(no message)");
  if (fileName !== null) {
    at = put(at, " (");
    at = put(at, fileName);
    at = put(at, ":");
    at = putNumber(at, line);
    at = put(at, ":");
    at = putNumber(at, column);
    at = put(at, ")");
  }
  raw.log(<i32>LogLevel.ERROR, abortBuf, <u32>at);
  unreachable();
}

/** `trace` for wasmext plugins: one debug line "trace: <message> a0, a1, ...". */
export function wasmextTrace(message: string, n: i32 = 0, a0: f64 = 0, a1: f64 = 0,
  a2: f64 = 0, a3: f64 = 0, a4: f64 = 0): void {
  let text = "trace: " + message;
  if (n > 0) text += " " + a0.toString();
  if (n > 1) text += ", " + a1.toString();
  if (n > 2) text += ", " + a2.toString();
  if (n > 3) text += ", " + a3.toString();
  if (n > 4) text += ", " + a4.toString();
  const buf = String.UTF8.encode(text, false, String.UTF8.ErrorMode.REPLACE);
  raw.log(<i32>LogLevel.DEBUG, changetype<usize>(buf), <u32>buf.byteLength);
}

// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "random_get")
declare function random_get(buf: usize, len: usize): u16;

/** `seed` for Math.random: 53 random bits from WASI's random_get. Only a
 * plugin that uses Math.random imports it (WASI imports are allowed). */
export function wasmextSeed(): f64 {
  const buf = memory.data(8);
  if (random_get(buf, 8) != 0) return 1.0;
  return <f64>(load<u64>(buf) >>> 11);
}

// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "clock_time_get")
declare function clock_time_get(id: u32, precision: u64, time: usize): u16;

function logLine(level: LogLevel, text: string): void {
  const buf = String.UTF8.encode(text, false, String.UTF8.ErrorMode.REPLACE);
  raw.log(<i32>level, changetype<usize>(buf), <u32>buf.byteLength);
}

// console.time labels and their start (monotonic nanoseconds); made on first use.
let timerMap: Map<string, u64> | null = null;

function timers(): Map<string, u64> {
  let m = timerMap;
  if (m === null) timerMap = m = new Map<string, u64>();
  return m;
}

function nowNs(): u64 {
  const at = memory.data(8);
  return clock_time_get(1, 1000, at) == 0 ? load<u64>(at) : 0;
}

/** `console` for wasmext plugins: each call is one line through the `log`
 * import (log and info at info level, debug, warn and error at theirs).
 * console.time* read WASI's monotonic clock, so only a plugin that uses them
 * imports clock_time_get. */
export namespace wasmextConsole {
  export function assert<T>(condition: T, message: string = ""): void {
    if (!condition) logLine(LogLevel.ERROR, "Assertion failed: " + message);
  }
  export function log(message: string = ""): void {
    logLine(LogLevel.INFO, message);
  }
  export function debug(message: string = ""): void {
    logLine(LogLevel.DEBUG, message);
  }
  export function info(message: string = ""): void {
    logLine(LogLevel.INFO, message);
  }
  export function warn(message: string = ""): void {
    logLine(LogLevel.WARN, message);
  }
  export function error(message: string = ""): void {
    logLine(LogLevel.ERROR, message);
  }
  export function time(label: string = "default"): void {
    timers().set(label, nowNs());
  }
  export function timeLog(label: string = "default"): void {
    if (!timers().has(label)) {
      logLine(LogLevel.WARN, "no timer '" + label + "'");
      return;
    }
    const ms = <f64>(nowNs() - timers().get(label)) / 1e6;
    logLine(LogLevel.INFO, label + ": " + ms.toString() + "ms");
  }
  export function timeEnd(label: string = "default"): void {
    timeLog(label);
    timers().delete(label);
  }
}
