//! Hook "greet": data is a name; the reply is "<greeting>, <name>!".

const std = @import("std");
const wasmext = @import("wasmext");

const Hello = struct {
    pub const name = "hello";
    pub const version = "0.1.0";
    pub const hooks = [_]wasmext.Hook{.{ .hook = "greet" }};

    pub fn greet(call: *wasmext.Call) !wasmext.Reply {
        const who = try call.dataString();

        const answer = try wasmext.configGet("greeting");
        const greeting = if (answer.ok)
            try answer.valueString()
        else if (answer.is(wasmext.abi.err.not_found))
            "Hello"
        else
            return .{ .fail = answer.failure() };

        wasmext.logf(.info, "greeting {s}", .{who});
        const text = try std.mem.concat(call.arena, u8, &.{ greeting, ", ", who, "!" });
        return call.returnString(text);
    }
};

comptime {
    wasmext.exportPlugin(Hello);
}
