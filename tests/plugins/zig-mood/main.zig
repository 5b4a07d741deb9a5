//! #mood asks the host's model in JSON mode, #plain without it; each answers the
//! model's text, so a test sees what the Zig SDK sent.
const wasmext = @import("wasmext");

const Mood = struct {
    pub const name = "zig-mood";
    pub const hooks = [_]wasmext.Hook{
        .{ .hook = "output_extension", .pattern = "mood", .handler = "mood" },
        .{ .hook = "output_extension", .pattern = "plain", .handler = "plain" },
    };

    fn ask(call: *wasmext.Call, json_mode: bool) !wasmext.Reply {
        var at = (try call.data.lookup("answer")) orelse
            return wasmext.Reply.failure("invalid", "output_extension data needs an answer");
        const answer = try at.readStr();
        const reply = if (json_mode)
            try wasmext.llmComplete(.{ .system = "Rate the mood as JSON.", .prompt = answer, .max_tokens = 64, .temperature = 0, .json_mode = true })
        else
            try wasmext.llmComplete(.{ .prompt = answer, .max_tokens = 64 });
        if (!reply.ok) return wasmext.Reply.failure("failed", reply.message);
        var text = (try reply.reader().lookup("text")) orelse
            return wasmext.Reply.failure("invalid", "the answer has no text");
        return call.returnString(try text.readStr());
    }

    pub fn mood(call: *wasmext.Call) !wasmext.Reply {
        return ask(call, true);
    }

    pub fn plain(call: *wasmext.Call) !wasmext.Reply {
        return ask(call, false);
    }
};

comptime {
    wasmext.exportPlugin(Mood);
}
