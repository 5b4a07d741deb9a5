//! ABI v1 constants, written by hand from `abi/abi.toml` (the test
//! `tests/sdks/test_rust_sdk.py` compares every row with the table).

/// The major ABI version this SDK speaks; `wasmext_abi_version` returns it.
pub const ABI_MAJOR: u32 = 1;
/// The minor ABI version this SDK was built against (`abi_minor` at registration).
pub const ABI_MINOR: u32 = 3;
/// The minor that gave the registration map's `answer_region` its meaning (SPEC 1.4.1).
pub const ANSWER_REGION_SINCE: u32 = 3;

/// Names of the exports a plugin defines (SPEC 1.1).
pub mod export {
    pub const MEMORY: &str = "memory";
    pub const ABI_VERSION: &str = "wasmext_abi_version";
    pub const ALLOC: &str = "wasmext_alloc";
    pub const FREE: &str = "wasmext_free";
    pub const REGISTER: &str = "wasmext_register";
    pub const CALL: &str = "wasmext_call";
    pub const INITIALIZE: &str = "_initialize";
}

/// Module and names of the imports a plugin may use (SPEC 1.2).
pub mod import {
    pub const MODULE: &str = "wasmext";
    pub const HOST_CALL: &str = "host_call";
    pub const LOG: &str = "log";
}

/// Error codes carried as `error.code` (SPEC 4.4).
pub mod code {
    pub const UNSUPPORTED: &str = "unsupported";
    pub const DENIED: &str = "denied";
    pub const INVALID: &str = "invalid";
    pub const NOT_FOUND: &str = "not_found";
    pub const LIMIT: &str = "limit";
    pub const CONFLICT: &str = "conflict";
    pub const TIMEOUT: &str = "timeout";
    pub const UNAVAILABLE: &str = "unavailable";
    pub const INTERNAL: &str = "internal";
    pub const UNHANDLED: &str = "unhandled";
    pub const FAILED: &str = "failed";

    /// Every code, in the order of the table.
    pub const ALL: &[&str] = &[
        UNSUPPORTED,
        DENIED,
        INVALID,
        NOT_FOUND,
        LIMIT,
        CONFLICT,
        TIMEOUT,
        UNAVAILABLE,
        INTERNAL,
        UNHANDLED,
        FAILED,
    ];
}

/// host_call op names (SPEC 4.3).
pub mod op {
    pub const LOG: &str = "log";
    pub const CONFIG_GET: &str = "config.get";
    pub const ABI_INFO: &str = "abi.info";
    pub const SECRET_GET: &str = "secret.get";
    pub const STATE_GET: &str = "state.get";
    pub const STATE_SET: &str = "state.set";
    pub const STATE_DELETE: &str = "state.delete";
    pub const STATE_KEYS: &str = "state.keys";
    pub const STATE_CLEAR: &str = "state.clear";
    pub const STATE_CAS: &str = "state.cas";
    pub const EVENT_EMIT: &str = "event.emit";
    pub const TOOL_CALL: &str = "tool.call";
    pub const NEXT: &str = "next";
    pub const HTTP_FETCH: &str = "http.fetch";
    pub const LLM_COMPLETE: &str = "llm.complete";
    pub const AGENTS_REQUEST: &str = "agents.request";
    pub const AGENTS_SEND: &str = "agents.send";
    pub const PROGRESS: &str = "progress";
    pub const RESOURCE_LIST: &str = "resource.list";
    pub const RESOURCE_READ: &str = "resource.read";
    pub const PROMPT_LIST: &str = "prompt.list";
    pub const PROMPT_GET: &str = "prompt.get";
    pub const METRIC_ADD: &str = "metric.add";
    pub const METRIC_SET: &str = "metric.set";
    pub const METRIC_OBSERVE: &str = "metric.observe";
    pub const TOOL_REGISTER: &str = "tool.register";
}

/// One row of the op table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpInfo {
    pub op: &'static str,
    /// The capability the plugin must be granted; "" when always allowed.
    pub capability: &'static str,
    /// The ABI minor that introduced the op.
    pub since: u32,
    /// True when the host implements it, false when it is reserved.
    pub implemented: bool,
}

const fn row(op: &'static str, capability: &'static str, since: u32, implemented: bool) -> OpInfo {
    OpInfo {
        op,
        capability,
        since,
        implemented,
    }
}

/// Every op of the table.
pub const OPS: &[OpInfo] = &[
    row(op::LOG, "", 0, true),
    row(op::CONFIG_GET, "", 0, true),
    row(op::ABI_INFO, "", 0, true),
    row(op::SECRET_GET, "secrets", 0, true),
    row(op::STATE_GET, "state", 0, true),
    row(op::STATE_SET, "state", 0, true),
    row(op::STATE_DELETE, "state", 0, true),
    row(op::STATE_KEYS, "state", 0, true),
    row(op::STATE_CLEAR, "state", 0, true),
    row(op::STATE_CAS, "state", 0, true),
    row(op::EVENT_EMIT, "events", 0, true),
    row(op::TOOL_CALL, "tools", 0, true),
    row(op::NEXT, "", 0, true),
    row(op::HTTP_FETCH, "http", 1, true),
    row(op::LLM_COMPLETE, "llm", 1, true),
    row(op::AGENTS_REQUEST, "agents", 1, true),
    row(op::AGENTS_SEND, "agents", 1, true),
    row(op::PROGRESS, "", 1, true),
    row(op::RESOURCE_LIST, "resources", 1, true),
    row(op::RESOURCE_READ, "resources", 1, true),
    row(op::PROMPT_LIST, "prompts", 1, true),
    row(op::PROMPT_GET, "prompts", 1, true),
    row(op::METRIC_ADD, "", 2, true),
    row(op::METRIC_SET, "", 2, true),
    row(op::METRIC_OBSERVE, "", 2, true),
    row(op::TOOL_REGISTER, "", 2, true),
];

/// The row of `name`, if the table has one.
pub fn op_info(name: &str) -> Option<&'static OpInfo> {
    OPS.iter().find(|o| o.op == name)
}

/// Levels of the `log` import and the `log` op.
pub mod log_level {
    pub const TRACE: i32 = 0;
    pub const DEBUG: i32 = 1;
    pub const INFO: i32 = 2;
    pub const WARN: i32 = 3;
    pub const ERROR: i32 = 4;
}

/// Default limits (SPEC 5).
pub mod limits {
    pub const FUEL_PER_CALL: u64 = 50_000_000;
    pub const MEMORY_BYTES: u64 = 67_108_864;
    pub const TABLE_ELEMENTS: u64 = 100_000;
    pub const TIMEOUT_MS: u64 = 1000;
    pub const MAX_INPUT_BYTES: u64 = 1_048_576;
    pub const MAX_OUTPUT_BYTES: u64 = 1_048_576;
    pub const MAX_HOST_CALLS: u64 = 1000;
    pub const HOST_CALL_TIMEOUT_MS: u64 = 1000;
    pub const MAX_HOST_REQUEST_BYTES: u64 = 262_144;
    pub const MAX_MSGPACK_DEPTH: u64 = 64;
    pub const MAX_WASM_STACK_BYTES: u64 = 524_288;
    pub const MAX_LOG_LINE_BYTES: u64 = 2048;
    pub const MAX_LOG_LINES: u64 = 1000;

    /// Every limit by its name in the table.
    pub const ALL: &[(&str, u64)] = &[
        ("fuel_per_call", FUEL_PER_CALL),
        ("memory_bytes", MEMORY_BYTES),
        ("table_elements", TABLE_ELEMENTS),
        ("timeout_ms", TIMEOUT_MS),
        ("max_input_bytes", MAX_INPUT_BYTES),
        ("max_output_bytes", MAX_OUTPUT_BYTES),
        ("max_host_calls", MAX_HOST_CALLS),
        ("host_call_timeout_ms", HOST_CALL_TIMEOUT_MS),
        ("max_host_request_bytes", MAX_HOST_REQUEST_BYTES),
        ("max_msgpack_depth", MAX_MSGPACK_DEPTH),
        ("max_wasm_stack_bytes", MAX_WASM_STACK_BYTES),
        ("max_log_line_bytes", MAX_LOG_LINE_BYTES),
        ("max_log_lines", MAX_LOG_LINES),
    ];
}
