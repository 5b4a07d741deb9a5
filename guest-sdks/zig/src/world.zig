//! Typed wrappers for the ops beyond config/secret: state.* and event.emit
//! (minor 0); http.fetch, llm.complete, agents.request and agents.send
//! (minor 1), which answer `unsupported` locally when the host announced a
//! minor below 1 (SPEC 3.1).

const std = @import("std");
const abi = @import("abi.zig");
const host = @import("host.zig");
const msgpack = @import("msgpack.zig");

const Answer = host.Answer;

const too_old: Answer = .{
    .raw = "\x82\xa2ok\xc2\xa5error\x82\xa4code\xabunsupported\xa7message\xa7minor<1",
    .ok = false,
    .code = abi.err.unsupported,
    .message = "minor<1",
};

fn begin(w: *msgpack.Writer, op: []const u8, pairs: u32) msgpack.WriteError!void {
    try w.writeMap(pairs + 1);
    try w.writeStr("op");
    try w.writeStr(op);
}

/// `http.fetch` (grants `http`, `http:<host pattern>`): `headers` is null or
/// one encoded MessagePack map of strings, `body` null for none. The answer's
/// value is `{status, headers, body, url}`.
pub fn httpFetch(method: []const u8, url: []const u8, headers: ?[]const u8, body: ?[]const u8) msgpack.WriteError!Answer {
    if (host.hostAbiMinor() < 1) return too_old;
    var w: msgpack.Writer = .init(host.arena());
    try begin(&w, abi.op.http_fetch, 2 + @as(u32, @intFromBool(headers != null)) + @intFromBool(body != null));
    try w.writeStr("url");
    try w.writeStr(url);
    try w.writeStr("method");
    try w.writeStr(method);
    if (headers) |h| {
        try w.writeStr("headers");
        try w.writeRaw(h);
    }
    if (body) |b| {
        try w.writeStr("body");
        try w.writeBin(b);
    }
    return host.hostCall(w.bytes());
}

/// One `llm.complete` request; null fields are left to the host.
pub const Completion = struct {
    system: ?[]const u8 = null,
    prompt: []const u8,
    model: ?[]const u8 = null,
    max_tokens: ?u32 = null,
    temperature: ?f64 = null,
    /// Ask the model for a JSON object (reference 003's `call_llm(json_mode=True)`).
    json_mode: bool = false,
};

/// `llm.complete` (grant `llm`): the answer's value is `{text,
/// finish_reason, model, usage: {input, output}, cost}`.
pub fn llmComplete(c: Completion) msgpack.WriteError!Answer {
    if (host.hostAbiMinor() < 1) return too_old;
    var w: msgpack.Writer = .init(host.arena());
    const extra = @as(u32, @intFromBool(c.model != null)) + @intFromBool(c.max_tokens != null) +
        @intFromBool(c.temperature != null) + @intFromBool(c.json_mode);
    try begin(&w, abi.op.llm_complete, 1 + extra);
    try w.writeStr("messages");
    try w.writeArray(if (c.system != null) 2 else 1);
    if (c.system) |s| try w.write(.{ .role = "system", .content = s });
    try w.write(.{ .role = "user", .content = c.prompt });
    if (c.model) |m| {
        try w.writeStr("model");
        try w.writeStr(m);
    }
    if (c.max_tokens) |n| {
        try w.writeStr("max_tokens");
        try w.writeInt(n);
    }
    if (c.temperature) |t| {
        try w.writeStr("temperature");
        try w.writeFloat(t);
    }
    if (c.json_mode) {
        try w.writeStr("json_mode");
        try w.writeBool(true);
    }
    return host.hostCall(w.bytes());
}

fn agentsOp(op: []const u8, agent: []const u8, input: []const u8, timeout_ms: ?u32) msgpack.WriteError!Answer {
    if (host.hostAbiMinor() < 1) return too_old;
    var w: msgpack.Writer = .init(host.arena());
    try begin(&w, op, 2 + @as(u32, @intFromBool(timeout_ms != null)));
    try w.writeStr("agent");
    try w.writeStr(agent);
    try w.writeStr("input");
    try w.writeRaw(input);
    if (timeout_ms) |ms| {
        try w.writeStr("timeout_ms");
        try w.writeInt(ms);
    }
    return host.hostCall(w.bytes());
}

/// `agents.request` (grants `agents`, `agents:<pattern>`; turn and step
/// middleware only): `input` is one encoded MessagePack value; null
/// `timeout_ms` is the host's 15 s. The answer's value is the agent's answer.
pub fn agentsRequest(agent: []const u8, input: []const u8, timeout_ms: ?u32) msgpack.WriteError!Answer {
    return agentsOp(abi.op.agents_request, agent, input, timeout_ms);
}

/// `agents.send`: `agentsRequest` without waiting for the answer.
pub fn agentsSend(agent: []const u8, input: []const u8) msgpack.WriteError!Answer {
    return agentsOp(abi.op.agents_send, agent, input, null);
}

/// Where a state op reads and writes: `session` (the default in every SDK and
/// the host: this session's value) or `plugin` (shared by the plugin's
/// sessions; the only scope a call outside a session may use).
pub const Scope = enum { session, plugin };

/// Options of `stateSet`: null leaves the scope (session) and TTL to the host.
pub const StateOptions = struct {
    scope: ?Scope = null,
    ttl: ?u32 = null,
};

/// `state.get` (grant `state`): the answer's value is the stored value; a
/// missing key answers `not_found`.
pub fn stateGet(key: []const u8, scope: ?Scope) msgpack.WriteError!Answer {
    var w: msgpack.Writer = .init(host.arena());
    try w.write(.{ .op = abi.op.state_get, .key = key, .scope = scope });
    return host.hostCall(w.bytes());
}

/// `state.set` (grant `state`): `value` is any value `Writer.write` takes.
pub fn stateSet(key: []const u8, value: anytype, options: StateOptions) msgpack.WriteError!Answer {
    var w: msgpack.Writer = .init(host.arena());
    try w.write(.{ .op = abi.op.state_set, .key = key, .value = value, .scope = options.scope, .ttl = options.ttl });
    return host.hostCall(w.bytes());
}

/// `state.delete` (grant `state`): the answer's value is whether the key existed.
pub fn stateDelete(key: []const u8, scope: ?Scope) msgpack.WriteError!Answer {
    var w: msgpack.Writer = .init(host.arena());
    try w.write(.{ .op = abi.op.state_delete, .key = key, .scope = scope });
    return host.hostCall(w.bytes());
}

/// `state.keys` (grant `state`): the answer's value is an array of key strings.
pub fn stateKeys(prefix: ?[]const u8, scope: ?Scope) msgpack.WriteError!Answer {
    var w: msgpack.Writer = .init(host.arena());
    try w.write(.{ .op = abi.op.state_keys, .prefix = prefix, .scope = scope });
    return host.hostCall(w.bytes());
}

/// `event.emit` (grants `events`, `emit:<pattern>`): `payload` is any value
/// `Writer.write` takes; the answer's value is how many subscribers it reached.
pub fn emit(topic: []const u8, payload: anytype) msgpack.WriteError!Answer {
    var w: msgpack.Writer = .init(host.arena());
    try w.writeMap(3);
    try w.writeStr("op");
    try w.writeStr(abi.op.event_emit);
    try w.writeStr("topic");
    try w.writeStr(topic);
    try w.writeStr("payload");
    try w.write(payload);
    return host.hostCall(w.bytes());
}
