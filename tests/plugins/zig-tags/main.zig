//! Two on_tag handlers told apart by pattern, and extra registration entries.
const std = @import("std");
const wasmext = @import("wasmext");

const Tags = struct {
    pub const name = "zig-tags";
    pub const hooks = [_]wasmext.Hook{
        .{ .hook = "on_tag", .pattern = "upper", .handler = "upper" },
        .{ .hook = "on_tag", .pattern = "redact*", .handler = "redact" },
    };

    pub fn upper(call: *wasmext.Call) !wasmext.Reply {
        const content = (try call.data.lookup("content")) orelse return .unchanged;
        var r = content;
        const text = try r.readStr();
        const out = try call.arena.alloc(u8, text.len);
        for (text, 0..) |c, i| out[i] = std.ascii.toUpper(c);
        return call.returnString(out);
    }

    pub fn redact(call: *wasmext.Call) !wasmext.Reply {
        return call.returnString("[REDACTED]");
    }

    pub fn registerExtra(w: *wasmext.Writer) !u32 {
        try w.writeStr("subscriptions");
        try w.writeArray(1);
        try w.writeStr("audit.*");
        return 1;
    }
};

comptime {
    wasmext.exportPlugin(Tags);
}
