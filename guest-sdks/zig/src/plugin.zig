//! Plugin interface: a plugin is a struct of declarations, and
//! `exportPlugin` turns it into the ABI exports (SPEC 1.1, 3 and 4.1).

const std = @import("std");
const abi = @import("abi.zig");
const raw = @import("raw.zig");
const msgpack = @import("msgpack.zig");
const host = @import("host.zig");

const Allocator = std.mem.Allocator;
const Failure = host.Failure;
const str = msgpack.comptimeStr;

/// One entry of the registration map's "hooks" array. The plugin struct needs
/// a `pub fn` named `handler`, or named like `hook` when `handler` is null.
pub const Hook = struct {
    hook: []const u8,
    /// 0..100, higher runs earlier; null leaves it to the manifest's priority.
    priority: ?u8 = null,
    /// An exact name or a prefix ending in '*'. With several entries for one hook
    /// (on_tag, output_extension), a call goes to the first entry whose pattern
    /// matches the data's "tag" (or "name").
    pattern: ?[]const u8 = null,
    /// The handler's name in the plugin struct, when it is not `hook`.
    handler: ?[]const u8 = null,

    fn handlerName(comptime h: Hook) []const u8 {
        return h.handler orelse h.hook;
    }
};

/// What a handler answers.
pub const Reply = union(enum) {
    /// `{"ok": true}`: pass the input on as it was.
    unchanged,
    /// `{"ok": true, "value": v}` with v the one value written to `Call.out`.
    value,
    /// Like `value` plus `"stop": true`; with nothing written, stop without a value.
    stop,
    /// `{"ok": false, "error": {"code", "message"}}`.
    fail: Failure,

    pub fn failure(code: []const u8, message: []const u8) Reply {
        return .{ .fail = .{ .code = code, .message = message } };
    }
};

/// One hook call as a handler sees it. Everything it points to stays valid
/// until the handler returns and its reply is written.
pub const Call = struct {
    hook: []const u8,
    /// Reader on the call's "data" (nil when the request had none).
    data: msgpack.Reader,
    /// Reader on the call's "meta", if any.
    meta: ?msgpack.Reader,
    /// Scratch memory, freed when the call returns.
    arena: Allocator,
    /// Write the reply value here (exactly one value), then return `.value`
    /// or `.stop`.
    out: *msgpack.Writer,

    /// The data as a string, or `error.TypeMismatch` (answered as `invalid`).
    pub fn dataString(c: *const Call) msgpack.ReadError![]const u8 {
        var r = c.data;
        return r.readStr();
    }

    pub fn returnString(c: *Call, s: []const u8) msgpack.WriteError!Reply {
        try c.out.writeStr(s);
        return .value;
    }

    /// Writes any value `Writer.write` accepts and replies with it.
    pub fn returnValue(c: *Call, v: anytype) msgpack.WriteError!Reply {
        try c.out.write(v);
        return .value;
    }
};

/// Defines the exports `wasmext_abi_version`, `wasmext_alloc`,
/// `wasmext_free`, `wasmext_register` and `wasmext_call` for plugin struct P.
/// Use it once, at comptime: `comptime { wasmext.exportPlugin(MyPlugin); }`.
///
/// P may declare (all optional): `name` and `version` (strings for the
/// registration map), `hooks` (array of `Hook`), and for each hook a
/// `pub fn <hook>(call: *wasmext.Call) !wasmext.Reply` (or `Reply`).
/// Calls to hooks P does not list answer `unhandled`.
pub fn exportPlugin(comptime P: type) void {
    const hooks: []const Hook = if (@hasDecl(P, "hooks")) P.hooks[0..] else &.{};
    inline for (hooks) |h| {
        if ((h.priority orelse 0) > 100) @compileError("hook '" ++ h.hook ++ "': priority must be 0..100");
        if (!@hasDecl(P, h.handlerName())) @compileError(@typeName(P) ++ " lists hook '" ++
            h.hook ++ "' but has no `pub fn " ++ h.handlerName() ++
            "(call: *wasmext.Call) !wasmext.Reply`");
    }
    const Exports = struct {
        fn abiVersion() callconv(.c) i32 {
            return abi.abi_major;
        }
        fn alloc(size: u32) callconv(.c) u32 {
            return host.allocForHost(size);
        }
        fn free(ptr: u32, size: u32) callconv(.c) void {
            host.freeForHost(ptr, size);
        }
        fn register(ptr: u32, len: u32) callconv(.c) i64 {
            defer host.endCall();
            host.setHostAbiMinor(hostMinor(input(ptr, len)) catch 0);
            output.clear();
            writeRegistration(P, hooks) catch return 0;
            return packOutput(output.bytes());
        }
        fn call(ptr: u32, len: u32) callconv(.c) i64 {
            defer host.endCall();
            output.clear();
            finishReply(dispatch(P, hooks, input(ptr, len))) catch return packOutput(out_of_memory);
            return packOutput(output.bytes());
        }
    };
    @export(&Exports.abiVersion, .{ .name = "wasmext_abi_version" });
    @export(&Exports.alloc, .{ .name = "wasmext_alloc" });
    @export(&Exports.free, .{ .name = "wasmext_free" });
    @export(&Exports.register, .{ .name = "wasmext_register" });
    @export(&Exports.call, .{ .name = "wasmext_call" });
}

/// The one output buffer, reused by every call: the host copies a response
/// before it enters the guest again (SPEC 1.4).
var output: msgpack.Writer = .init(host.allocator);

/// A successful reply's start. Handlers append their value right after it,
/// so a reply is built without copying the value; `.stop` patches the map
/// size from 2 to 3.
const value_prefix = "\x82" ++ str("ok") ++ "\xc3" ++ str("value");
const ok_only = "\x81" ++ str("ok") ++ "\xc3";
const stop_only = "\x82" ++ str("ok") ++ "\xc3" ++ str("stop") ++ "\xc3";
const out_of_memory = "\x82" ++ str("ok") ++ "\xc2" ++ str("error") ++ "\x82" ++
    str("code") ++ str(abi.err.limit) ++ str("message") ++ str("the plugin ran out of memory");

fn input(ptr: u32, len: u32) []const u8 {
    if (ptr == 0) return &.{};
    const base: [*]const u8 = @ptrFromInt(ptr);
    return base[0..len];
}

fn packOutput(bytes: []const u8) i64 {
    return raw.pack(@intCast(@intFromPtr(bytes.ptr)), @intCast(bytes.len));
}

fn hostMinor(request: []const u8) msgpack.ReadError!i32 {
    const abi_map = (try msgpack.Reader.init(request).lookup("abi")) orelse return 0;
    var minor = (try abi_map.lookup("minor")) orelse return 0;
    return minor.readInt(i32);
}

/// The registration map. A plugin may add entries ("prompt", "tool_guidance",
/// "subscriptions", ...) with `pub fn registerExtra(w: *wasmext.Writer) !u32`,
/// which writes key/value pairs and returns how many.
fn writeRegistration(comptime P: type, comptime hooks: []const Hook) msgpack.WriteError!void {
    var extra: msgpack.Writer = .init(host.allocator);
    defer extra.deinit();
    const n_extra: u32 = if (@hasDecl(P, "registerExtra")) try P.registerExtra(&extra) else 0;
    const has_name = @hasDecl(P, "name");
    const has_version = @hasDecl(P, "version");
    // Without registerExtra the map is comptime data, the same for every copy: the
    // host may reuse it (abi/SPEC.md 3.2).
    const shareable = !@hasDecl(P, "registerExtra");
    // An older host would keep the key as an unknown one: it is left out there.
    const area = host.hostAbiMinor() >= abi.registration.answer_region_since;
    try output.writeMap(2 + @as(u32, @intFromBool(has_name)) + @intFromBool(has_version) +
        @intFromBool(shareable) + @intFromBool(area) + n_extra);
    try output.writeStr("abi_minor");
    try output.writeInt(abi.abi_minor);
    if (area) {
        try output.writeStr(abi.registration.answer_region);
        try output.writeMap(2);
        try output.writeStr("ptr");
        try output.writeInt(host.answerAreaPtr());
        try output.writeStr("size");
        try output.writeInt(host.answer_area_size);
    }
    if (shareable) {
        try output.writeStr("shareable");
        try output.writeBool(true);
    }
    if (has_name) {
        try output.writeStr("name");
        try output.writeStr(P.name);
    }
    if (has_version) {
        try output.writeStr("version");
        try output.writeStr(P.version);
    }
    try output.writeStr("hooks");
    try output.writeArray(@intCast(hooks.len));
    inline for (hooks) |h| {
        try output.writeMap(1 + @as(u32, @intFromBool(h.priority != null)) +
            @intFromBool(h.pattern != null));
        try output.writeStr("hook");
        try output.writeStr(h.hook);
        if (h.priority) |p| {
            try output.writeStr("priority");
            try output.writeInt(p);
        }
        if (h.pattern) |pat| {
            try output.writeStr("pattern");
            try output.writeStr(pat);
        }
    }
    try output.writeRaw(extra.bytes());
}

fn patternMatches(pattern: []const u8, subject: []const u8) bool {
    if (pattern.len > 0 and pattern[pattern.len - 1] == '*')
        return std.mem.startsWith(u8, subject, pattern[0 .. pattern.len - 1]);
    return std.mem.eql(u8, pattern, subject);
}

/// The data's "tag" (on_tag) or "name" (output_extension), for pattern dispatch.
fn subjectOf(data: []const u8) ?[]const u8 {
    const map = msgpack.Reader.init(data);
    inline for (.{ "tag", "name" }) |key| {
        if (map.lookup(key) catch null) |found| {
            var v = found;
            return v.readStr() catch null;
        }
    }
    return null;
}

const Request = struct {
    hook: []const u8,
    data: []const u8 = "\xc0",
    meta: ?[]const u8 = null,
};

fn parseRequest(bytes: []const u8) (msgpack.ReadError || error{MissingHook})!Request {
    var r: msgpack.Reader = .init(bytes);
    var req: Request = .{ .hook = "" };
    var saw_hook = false;
    for (0..try r.readMapLen()) |_| {
        const key = try r.readKey();
        if (std.mem.eql(u8, key, "hook")) {
            req.hook = try r.readStr();
            saw_hook = true;
        } else if (std.mem.eql(u8, key, "data")) {
            req.data = try r.rawValue();
        } else if (std.mem.eql(u8, key, "meta")) {
            req.meta = try r.rawValue();
        } else try r.skip();
    }
    try r.finish();
    if (!saw_hook) return error.MissingHook;
    return req;
}

fn dispatch(comptime P: type, comptime hooks: []const Hook, request: []const u8) Reply {
    const req = parseRequest(request) catch |e| return .{ .fail = failureFor(e) };
    output.writeRaw(value_prefix) catch |e| return .{ .fail = failureFor(e) };
    var call: Call = .{
        .hook = req.hook,
        .data = .initChecked(req.data),
        .meta = if (req.meta) |m| .initChecked(m) else null,
        .arena = host.arena(),
        .out = &output,
    };
    const subject: ?[]const u8 = if (comptime anyPattern(hooks)) subjectOf(req.data) else null;
    inline for (hooks) |h| {
        if (std.mem.eql(u8, req.hook, h.hook)) {
            const matched = if (h.pattern) |pat|
                (if (subject) |s| patternMatches(pat, s) else false)
            else
                true;
            if (matched) return invoke(@field(P, h.handlerName()), &call);
        }
    }
    return .{ .fail = .{ .code = abi.err.unhandled } };
}

fn anyPattern(comptime hooks: []const Hook) bool {
    for (hooks) |h| if (h.pattern != null) return true;
    return false;
}

fn invoke(comptime handler: anytype, call: *Call) Reply {
    const Result = @typeInfo(@TypeOf(handler)).@"fn".return_type.?;
    if (@typeInfo(Result) == .error_union) {
        return handler(call) catch |e| .{ .fail = failureFor(e) };
    }
    return handler(call);
}

/// Turns a Zig error escaping a handler (or the request parser) into the
/// error the host sees: bad input is `invalid`, exhausted memory is `limit`,
/// anything else is the handler's own `failed` with the error's name.
fn failureFor(e: anyerror) Failure {
    return switch (e) {
        error.TypeMismatch => .{ .code = abi.err.invalid, .message = "unexpected MessagePack type" },
        error.Overflow => .{ .code = abi.err.invalid, .message = "number out of range" },
        error.MissingHook => .{ .code = abi.err.invalid, .message = "call request has no hook" },
        error.Truncated,
        error.TooDeep,
        error.ReservedByte,
        error.ExtensionType,
        error.InvalidUtf8,
        error.NonStringKey,
        error.TrailingBytes,
        => .{ .code = abi.err.invalid, .message = "malformed MessagePack" },
        error.OutOfMemory => .{ .code = abi.err.limit, .message = "the plugin ran out of memory" },
        error.TooLong => .{ .code = abi.err.limit, .message = "value too long for MessagePack" },
        else => .{ .code = abi.err.failed, .message = @errorName(e) },
    };
}

fn finishReply(reply: Reply) msgpack.WriteError!void {
    const wrote_value = output.bytes().len > value_prefix.len;
    switch (reply) {
        .value => if (!wrote_value) {
            return finishReply(.failure(abi.err.failed, "handler replied .value but wrote none"));
        },
        .stop => if (wrote_value) {
            output.buf.items[0] = 0x83;
            try output.writeRaw(str("stop") ++ "\xc3");
        } else {
            output.clear();
            try output.writeRaw(stop_only);
        },
        .unchanged => {
            output.clear();
            try output.writeRaw(ok_only);
        },
        .fail => |f| {
            output.clear();
            const message: ?[]const u8 = if (f.message.len == 0) null else f.message;
            try output.write(.{ .ok = false, .@"error" = .{ .code = f.code, .message = message } });
        },
    }
}
