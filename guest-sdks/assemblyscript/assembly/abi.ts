// ABI v1 constants, written by hand from abi/abi.toml (tests/sdks/test_assemblyscript_sdk.py
// compares every one of them with the table, so a change there fails the tests here).

/** The ABI this SDK speaks (SPEC 1.1 and 3.1). */
export const ABI_MAJOR: i32 = 1;
export const ABI_MINOR: i32 = 3;
/** The minor that gave the registration map's `answer_region` its meaning (SPEC 1.4.1). */
export const ANSWER_REGION_SINCE: i32 = 3;

/** Levels of the `log` import and the `log` op. */
export enum LogLevel {
  TRACE = 0,
  DEBUG = 1,
  INFO = 2,
  WARN = 3,
  ERROR = 4,
}

/** `error.code` strings (SPEC 4.4). */
export namespace ErrorCode {
  export const UNSUPPORTED = "unsupported";
  export const DENIED = "denied";
  export const INVALID = "invalid";
  export const NOT_FOUND = "not_found";
  export const LIMIT = "limit";
  export const CONFLICT = "conflict";
  export const TIMEOUT = "timeout";
  export const UNAVAILABLE = "unavailable";
  export const INTERNAL = "internal";
  export const UNHANDLED = "unhandled";
  export const FAILED = "failed";
}

/** host_call op names (SPEC 4.3); every op up to ABI minor 1. */
export namespace Op {
  export const LOG = "log";
  export const CONFIG_GET = "config.get";
  export const ABI_INFO = "abi.info";
  export const SECRET_GET = "secret.get";
  export const STATE_GET = "state.get";
  export const STATE_SET = "state.set";
  export const STATE_DELETE = "state.delete";
  export const STATE_KEYS = "state.keys";
  export const STATE_CLEAR = "state.clear";
  export const STATE_CAS = "state.cas";
  export const EVENT_EMIT = "event.emit";
  export const TOOL_CALL = "tool.call";
  export const NEXT = "next";
  export const HTTP_FETCH = "http.fetch";
  export const LLM_COMPLETE = "llm.complete";
  export const AGENTS_REQUEST = "agents.request";
  export const AGENTS_SEND = "agents.send";
  export const PROGRESS = "progress";
  export const RESOURCE_LIST = "resource.list";
  export const RESOURCE_READ = "resource.read";
  export const PROMPT_LIST = "prompt.list";
  export const PROMPT_GET = "prompt.get";
  export const METRIC_ADD = "metric.add";
  export const METRIC_SET = "metric.set";
  export const METRIC_OBSERVE = "metric.observe";
  export const TOOL_REGISTER = "tool.register";
}

/** Export names (SPEC 1.1); exports.ts defines the functions. */
export namespace ExportName {
  export const MEMORY = "memory";
  export const ABI_VERSION = "wasmext_abi_version";
  export const ALLOC = "wasmext_alloc";
  export const FREE = "wasmext_free";
  export const REGISTER = "wasmext_register";
  export const CALL = "wasmext_call";
  export const INITIALIZE = "_initialize";
}

/** Import names (SPEC 1.2); raw.ts declares them. */
export namespace ImportName {
  export const MODULE = "wasmext";
  export const HOST_CALL = "host_call";
  export const LOG = "log";
}

/** The host's default limits (SPEC 5). */
export namespace Limits {
  export const FUEL_PER_CALL: i64 = 50_000_000;
  export const MEMORY_BYTES: i64 = 67_108_864;
  export const TABLE_ELEMENTS: i64 = 100_000;
  export const TIMEOUT_MS: i64 = 1000;
  export const MAX_INPUT_BYTES: i64 = 1_048_576;
  export const MAX_OUTPUT_BYTES: i64 = 1_048_576;
  export const MAX_HOST_CALLS: i64 = 1000;
  export const HOST_CALL_TIMEOUT_MS: i64 = 1000;
  export const MAX_HOST_REQUEST_BYTES: i64 = 262_144;
  export const MAX_MSGPACK_DEPTH: i32 = 64;
  export const MAX_WASM_STACK_BYTES: i64 = 524_288;
  export const MAX_LOG_LINE_BYTES: i32 = 2048;
  export const MAX_LOG_LINES: i64 = 1000;
}
