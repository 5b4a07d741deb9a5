//! Conformance hooks: every SDK implements the same seven, so one Python
//! suite can check each SDK's MessagePack, memory handling and envelopes.

const std = @import("std");
const wasmext = @import("wasmext");

const Conformance = struct {
    pub const name = "zig-conformance";
    pub const version = "0.1.0";
    pub const hooks = [_]wasmext.Hook{
        .{ .hook = "echo" },     .{ .hook = "config" }, .{ .hook = "log" },
        .{ .hook = "host" },     .{ .hook = "fail" },   .{ .hook = "unchanged" },
        .{ .hook = "stop" },     .{ .hook = "fetch" },  .{ .hook = "llm" },
        .{ .hook = "turn" },     .{ .hook = "step" },   .{ .hook = "remember" },
        .{ .hook = "announce" }, .{ .hook = "hosts" },
    };

    /// Decodes the data token by token and encodes it again with the SDK
    /// writer, so the reply is the canonical encoding of the same value.
    pub fn echo(call: *wasmext.Call) !wasmext.Reply {
        try call.out.copyValue(&call.data);
        try call.data.finish();
        return .value;
    }

    /// data: a setting name -> its value; a refusal (not_found) is passed on.
    pub fn config(call: *wasmext.Call) !wasmext.Reply {
        const answer = try wasmext.configGet(try call.dataString());
        if (!answer.ok) return .{ .fail = answer.failure() };
        try call.out.writeRaw(answer.value);
        return .value;
    }

    /// data: text -> one info line through the direct log import; value nil.
    pub fn log(call: *wasmext.Call) !wasmext.Reply {
        wasmext.log(.info, try call.dataString());
        return call.returnValue(null);
    }

    /// data: a request map sent as-is -> the host's whole answer map.
    pub fn host(call: *wasmext.Call) !wasmext.Reply {
        if (try call.data.peek() != .map) return .failure(wasmext.abi.err.invalid, "data must be a map");
        const answer = wasmext.hostCall(try call.data.rawValue());
        try call.out.writeRaw(answer.raw);
        return .value;
    }

    /// data: up to 8 request maps, all sent before any answer is read -> the
    /// array of the host's answers: each must outlive the host calls after it,
    /// wherever the host wrote it (the answer region of minor 3).
    pub fn hosts(call: *wasmext.Call) !wasmext.Reply {
        const n = try call.data.readArrayLen();
        if (n > 8) return .failure(wasmext.abi.err.invalid, "hosts expects up to 8 request maps");
        var answers: [8]wasmext.Answer = undefined;
        for (answers[0..n]) |*answer| answer.* = wasmext.hostCall(try call.data.rawValue());
        try call.out.writeArray(n);
        for (answers[0..n]) |answer| try call.out.writeRaw(answer.raw);
        return .value;
    }

    /// The minor-1 wrappers reply with the host's whole answer map, like `host`.
    fn whole(call: *wasmext.Call, answer: wasmext.Answer) !wasmext.Reply {
        try call.out.writeRaw(answer.raw);
        return .value;
    }

    /// data: url -> http.fetch GET.
    pub fn fetch(call: *wasmext.Call) !wasmext.Reply {
        return whole(call, try wasmext.httpFetch("GET", try call.dataString(), null, null));
    }

    /// data: prompt -> llm.complete with max_tokens 50.
    pub fn llm(call: *wasmext.Call) !wasmext.Reply {
        return whole(call, try wasmext.llmComplete(.{ .prompt = try call.dataString(), .max_tokens = 50 }));
    }

    /// data: key -> state.set of "v:<key>", then state.get of it (session scope).
    pub fn remember(call: *wasmext.Call) !wasmext.Reply {
        const key = try call.dataString();
        const value = try std.fmt.allocPrint(call.arena, "v:{s}", .{key});
        const stored = try wasmext.stateSet(key, value, .{});
        if (!stored.ok) return whole(call, stored);
        return whole(call, try wasmext.stateGet(key, null));
    }

    /// data: topic -> event.emit with the payload "hi".
    pub fn announce(call: *wasmext.Call) !wasmext.Reply {
        return whole(call, try wasmext.emit(try call.dataString(), "hi"));
    }

    /// data: agent -> agents.request with input "ping".
    pub fn turn(call: *wasmext.Call) !wasmext.Reply {
        return whole(call, try wasmext.agentsRequest(try call.dataString(), "\xa4ping", null));
    }

    /// data: agent -> agents.send with input "ping".
    pub fn step(call: *wasmext.Call) !wasmext.Reply {
        return whole(call, try wasmext.agentsSend(try call.dataString(), "\xa4ping"));
    }

    /// data: text -> an error with code "failed" and that text as message.
    pub fn fail(call: *wasmext.Call) !wasmext.Reply {
        return .failure(wasmext.abi.err.failed, try call.dataString());
    }

    pub fn unchanged(_: *wasmext.Call) wasmext.Reply {
        return .unchanged;
    }

    /// Replies with the data and asks the host to stop the chain.
    pub fn stop(call: *wasmext.Call) !wasmext.Reply {
        try call.out.copyValue(&call.data);
        return .stop;
    }
};

comptime {
    wasmext.exportPlugin(Conformance);
}
