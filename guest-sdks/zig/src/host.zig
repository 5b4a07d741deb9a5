//! Safe layer: the memory the guest and the host hand each other (SPEC 1.4),
//! logging, and host calls whose answers come back checked and decoded.

const std = @import("std");
const abi = @import("abi.zig");
const raw = @import("raw.zig");
const msgpack = @import("msgpack.zig");

const Allocator = std.mem.Allocator;

/// Long-lived guest memory: the input regions the host keeps, the output
/// buffer, and whatever state a plugin keeps between calls.
pub const allocator: Allocator = std.heap.wasm_allocator;

/// Per-call memory, given back in one go when an export returns. Handlers
/// get it as `Call.arena`.
var call_arena: std.heap.ArenaAllocator = .init(allocator);

/// How much arena memory survives between calls, so that a steady stream of
/// calls does not go back to the allocator each time, while one huge call
/// does not pin its peak forever.
const arena_keep_bytes = 256 * 1024;

/// The last region `wasmext_alloc` handed out. During host_call that is the
/// region of the answer, whose size the guest needs to free it later.
var last_alloc: struct { ptr: u32 = 0, size: u32 = 0 } = .{};

/// host_call answer regions of the current export call. They belong to the
/// guest (SPEC 1.4) and are freed when the call returns, so every `Answer`
/// stays valid until the reply is written. Keeping no "inside host_call"
/// flag means a trap in the middle of a host call cannot leave the
/// allocator in a mode that would misplace the host's next input region.
var answer_regions: std.ArrayList([]u8) = .empty;

var host_minor: i32 = 0;

/// How many bytes of answer the answer region holds (SPEC 1.4.1).
pub const answer_area_size = 1024;

/// The area declared as "answer_region" to a host of minor 3 (SPEC 1.4.1):
/// the host writes an answer that fits here instead of entering
/// `wasmext_alloc` a second time. `hostCall` copies an answer found here into
/// the call arena at once, so every `Answer` stays valid until the export
/// call returns, whatever host calls follow it.
var answer_area: [answer_area_size]u8 align(8) = undefined;

/// The answer region's address, for the registration map.
pub fn answerAreaPtr() u32 {
    return @intCast(@intFromPtr(&answer_area));
}

pub fn arena() Allocator {
    return call_arena.allocator();
}

/// Ends an export call: frees the host_call answers and the call arena.
pub fn endCall() void {
    for (answer_regions.items) |region| allocator.rawFree(region, .@"8", @returnAddress());
    answer_regions.clearRetainingCapacity();
    _ = call_arena.reset(.{ .retain_with_limit = arena_keep_bytes });
}

/// Backs the `wasmext_alloc` export: `size` bytes aligned to 8, or 0.
pub fn allocForHost(size: u32) u32 {
    // A zero-length allocation has no address; the host needs a real one.
    const n = @max(size, 1);
    const region = allocator.rawAlloc(n, .@"8", @returnAddress()) orelse return 0;
    last_alloc = .{ .ptr = @intCast(@intFromPtr(region)), .size = n };
    return last_alloc.ptr;
}

/// Backs the `wasmext_free` export: gives back an input region.
pub fn freeForHost(ptr: u32, size: u32) void {
    if (ptr == 0) return;
    const region: [*]u8 = @ptrFromInt(ptr);
    allocator.rawFree(region[0..@max(size, 1)], .@"8", @returnAddress());
}

/// The minor ABI version the host announced at registration (0 until then).
pub fn hostAbiMinor() i32 {
    return host_minor;
}

pub fn setHostAbiMinor(minor: i32) void {
    host_minor = minor;
}

/// An error as the ABI carries it: an `error.code` string and a message.
pub const Failure = struct {
    code: []const u8,
    message: []const u8 = "",
};

/// The host's answer to one host_call. Its slices stay valid until the
/// current export call returns.
pub const Answer = struct {
    /// The whole answer map, exactly as the host sent it.
    raw: []const u8,
    ok: bool,
    /// The encoded "value" (nil when the answer has none).
    value: []const u8 = "\xc0",
    /// `error.code` and `error.message` when `ok` is false.
    code: []const u8 = "",
    message: []const u8 = "",

    /// A reader on the value.
    pub fn reader(a: Answer) msgpack.Reader {
        return .initChecked(a.value);
    }

    /// The value as a string, or `error.TypeMismatch`.
    pub fn valueString(a: Answer) msgpack.ReadError![]const u8 {
        var r = a.reader();
        return r.readStr();
    }

    /// True when the host refused with this error code.
    pub fn is(a: Answer, code: []const u8) bool {
        return !a.ok and std.mem.eql(u8, a.code, code);
    }

    /// The refusal, ready to return from a handler.
    pub fn failure(a: Answer) Failure {
        return .{ .code = a.code, .message = a.message };
    }
};

/// Logs one line through the direct `log` import (cheaper than the op).
pub fn log(level: abi.LogLevel, text: []const u8) void {
    raw.log(@backingInt(level), text.ptr, @intCast(@min(text.len, std.math.maxInt(u32))));
}

/// Formats into a stack buffer of one log line; longer text is cut, as the
/// host would cut it anyway.
pub fn logf(level: abi.LogLevel, comptime fmt: []const u8, args: anytype) void {
    var buf: [abi.limits.max_log_line_bytes]u8 = undefined;
    var w: std.Io.Writer = .fixed(&buf);
    w.print(fmt, args) catch {}; // full: log what fitted
    log(level, w.buffered());
}

/// Sends one encoded request map (`{"op": ..., args}`) to the host. Never
/// fails: when the host cannot answer, or answers something malformed, the
/// result is an `internal` answer made up by the SDK (SPEC 4.2).
pub fn hostCall(request: []const u8) Answer {
    const len = std.math.cast(u32, request.len) orelse return request_too_long;
    last_alloc = .{};
    const answer = raw.host_call(request.ptr, len);
    if (answer == 0) return no_answer;
    const region = raw.unpack(answer);
    if (region.ptr == 0) return malformed_answer;
    const base: [*]u8 = @ptrFromInt(region.ptr);
    if (region.ptr == answerAreaPtr()) {
        if (region.len > answer_area.len) return malformed_answer;
        const copy = arena().dupe(u8, answer_area[0..region.len]) catch return out_of_memory;
        return parseAnswer(copy) catch malformed_answer;
    }
    // Only a region this SDK handed out is freed, with the size it has: a
    // wrong free would corrupt the heap, a missed one only leaks.
    if (region.ptr == last_alloc.ptr) {
        const owned = base[0..last_alloc.size];
        answer_regions.append(allocator, owned) catch {
            allocator.rawFree(owned, .@"8", @returnAddress());
            return out_of_memory;
        };
        if (region.len > owned.len) return malformed_answer;
    }
    return parseAnswer(base[0..region.len]) catch malformed_answer;
}

/// `config.get` of one setting: its value, or a `not_found` answer.
pub fn configGet(key: []const u8) msgpack.WriteError!Answer {
    var w: msgpack.Writer = .init(arena());
    try w.write(.{ .op = abi.op.config_get, .key = key });
    return hostCall(w.bytes());
}

/// `config.get` without a key: a map of every non-sensitive setting.
pub fn configAll() Answer {
    const request = comptime "\x81" ++ msgpack.comptimeStr("op") ++ msgpack.comptimeStr(abi.op.config_get);
    return hostCall(request);
}

fn parseAnswer(bytes: []const u8) msgpack.ReadError!Answer {
    var r: msgpack.Reader = .init(bytes);
    var answer: Answer = .{ .raw = bytes, .ok = false };
    var saw_ok = false;
    for (0..try r.readMapLen()) |_| {
        const key = try r.readKey();
        if (std.mem.eql(u8, key, "ok")) {
            answer.ok = try r.readBool();
            saw_ok = true;
        } else if (std.mem.eql(u8, key, "value")) {
            answer.value = try r.rawValue();
        } else if (std.mem.eql(u8, key, "error")) {
            const err: msgpack.Reader = .initChecked(try r.rawValue());
            var code = (try err.lookup("code")) orelse return error.TypeMismatch;
            answer.code = try code.readStr();
            if (try err.lookup("message")) |m| {
                var message = m;
                answer.message = try message.readStr();
            }
        } else try r.skip();
    }
    try r.finish();
    if (!saw_ok or (!answer.ok and answer.code.len == 0)) return error.TypeMismatch;
    return answer;
}

fn localFailure(comptime code: []const u8, comptime message: []const u8) Answer {
    const str = msgpack.comptimeStr;
    const encoded = comptime "\x82" ++ str("ok") ++ "\xc2" ++ str("error") ++ "\x82" ++
        str("code") ++ str(code) ++ str("message") ++ str(message);
    return .{ .raw = encoded, .ok = false, .code = code, .message = message };
}

const no_answer = localFailure(abi.err.internal, "the host could not deliver an answer");
const malformed_answer = localFailure(abi.err.internal, "the host's answer is malformed");
const request_too_long = localFailure(abi.err.limit, "host_call request too long");
const out_of_memory = localFailure(abi.err.limit, "the plugin ran out of memory");
