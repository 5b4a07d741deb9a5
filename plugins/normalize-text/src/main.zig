//! normalize-text: hooks on_plain_text and on_llm_output take a string and
//! reply with its normalized form (rules in normalize.zig), or "unchanged".

const std = @import("std");
const wasmext = @import("wasmext");
const normalize = @import("normalize.zig");

const NormalizeText = struct {
    pub const name = "normalize-text";
    pub const version = "0.1.0";
    pub const hooks = [_]wasmext.Hook{ .{ .hook = "on_plain_text" }, .{ .hook = "on_llm_output" } };

    pub const on_plain_text = normalizeData;
    pub const on_llm_output = normalizeData;
};

comptime {
    wasmext.exportPlugin(NormalizeText);
}

fn normalizeData(call: *wasmext.Call) !wasmext.Reply {
    const text = try call.dataString();
    // Settings are read on every call, so a changed setting applies at once;
    // one config.get without a key fetches them all in one host call.
    const settings = wasmext.configAll();
    if (!settings.ok) return .{ .fail = settings.failure() };
    const opts = switch (try readOptions(settings.reader())) {
        .ok => |opts| opts,
        .invalid => |message| return .failure(wasmext.abi.err.invalid, message),
    };
    const result = try normalize.normalize(call.arena, text, opts);
    if (sameBytes(result, text)) return .unchanged;
    return call.returnString(result);
}

/// std.mem.eql goes byte by byte in this size-optimized build (about 20
/// instructions of fuel per byte); comparing 8 bytes per load is far cheaper.
fn sameBytes(a: []const u8, b: []const u8) bool {
    if (a.len != b.len) return false;
    var i: usize = 0;
    while (a.len - i >= 8) : (i += 8) {
        const wa = @as(*align(1) const u64, @ptrCast(a[i..][0..8])).*;
        const wb = @as(*align(1) const u64, @ptrCast(b[i..][0..8])).*;
        if (wa != wb) return false;
    }
    return std.mem.eql(u8, a[i..], b[i..]);
}

const Options = union(enum) {
    ok: normalize.Options,
    /// Names the setting and what it must be.
    invalid: []const u8,
};

/// Reads the settings map; a setting that is absent or nil keeps its default.
fn readOptions(settings: wasmext.Reader) wasmext.msgpack.ReadError!Options {
    if (try settings.peek() != .map) return .{ .invalid = "config.get returned no settings map" };
    var opts: normalize.Options = .{};
    inline for (.{ "lowercase", "whitespace" }) |key| {
        if (try setting(settings, key)) |value| {
            var r = value;
            @field(opts, key) = flag(&r) orelse return .{ .invalid = "setting '" ++ key ++ "' must be true or false" };
        }
    }
    if (try setting(settings, "emoji")) |value| {
        var r = value;
        const mode = r.readStr() catch null;
        opts.emoji = std.meta.stringToEnum(normalize.EmojiMode, mode orelse "") orelse
            return .{ .invalid = "setting 'emoji' must be \"keep\", \"strip\" or \"replace\"" };
    }
    if (try setting(settings, "emoji_replacement")) |value| {
        var r = value;
        opts.emoji_replacement = r.readStr() catch return .{ .invalid = "setting 'emoji_replacement' must be a string" };
    }
    return .{ .ok = opts };
}

fn setting(settings: wasmext.Reader, key: []const u8) wasmext.msgpack.ReadError!?wasmext.Reader {
    const value = try settings.lookup(key) orelse return null;
    return if (try value.peek() == .nil) null else value;
}

/// A bool, or the strings "true"/"false" that environment variables give.
fn flag(r: *wasmext.Reader) ?bool {
    if (r.readBool()) |b| return b else |_| {}
    const s = r.readStr() catch return null;
    if (std.ascii.eqlIgnoreCase(s, "true")) return true;
    if (std.ascii.eqlIgnoreCase(s, "false")) return false;
    return null;
}
