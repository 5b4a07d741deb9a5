//! Native unit tests of msgpack.zig: every vector of abi/vectors/msgpack.json
//! and hostile.json, plus hand-made hostile inputs. Run from guest-sdks/zig:
//!
//!     WASMEXT_VECTORS=../../abi/vectors zig test src/msgpack_test.zig
//!
//! The vectors live outside this module's folder, where @embedFile cannot
//! reach, so they are read at test time (WASMEXT_VECTORS, else the relative
//! path above).

const std = @import("std");
const msgpack = @import("msgpack.zig");

const Reader = msgpack.Reader;
const Writer = msgpack.Writer;
const json = std.json;
const testing = std.testing;
const gpa = testing.allocator;

fn loadVectors(comptime file: []const u8) !json.Parsed(json.Value) {
    const dir = testing.environ.getAlloc(gpa, "WASMEXT_VECTORS") catch |e| switch (e) {
        error.EnvironmentVariableMissing => try gpa.dupe(u8, "../../abi/vectors"),
        else => return e,
    };
    defer gpa.free(dir);
    const path = try std.fs.path.join(gpa, &.{ dir, file });
    defer gpa.free(path);
    const text = try std.Io.Dir.cwd().readFileAlloc(testing.io, path, gpa, .limited(16 << 20));
    defer gpa.free(text);
    return json.parseFromSlice(json.Value, gpa, text, .{});
}

fn unhex(arena: std.mem.Allocator, hex: []const u8) ![]u8 {
    const out = try arena.alloc(u8, hex.len / 2);
    return std.fmt.hexToBytes(out, hex);
}

/// The one-key objects the vector file uses for values JSON cannot hold.
fn special(v: json.Value, key: []const u8) ?[]const u8 {
    if (v != .object or v.object.count() != 1) return null;
    const s = v.object.get(key) orelse return null;
    return if (s == .string) s.string else null;
}

/// Encodes a vector's JSON value with the SDK writer.
fn encode(w: *Writer, arena: std.mem.Allocator, v: json.Value) !void {
    switch (v) {
        .null => try w.writeNil(),
        .bool => |b| try w.writeBool(b),
        .integer => |i| try w.writeInt(i),
        .number_string => |s| try w.writeInt(try std.fmt.parseInt(u64, s, 10)),
        .string => |s| try w.writeStr(s),
        .array => |a| {
            try w.writeArray(@intCast(a.items.len));
            for (a.items) |item| try encode(w, arena, item);
        },
        .object => |o| {
            if (special(v, "$f64")) |f| return w.writeFloat(try std.fmt.parseFloat(f64, f));
            if (special(v, "$bin")) |h| return w.writeBin(try unhex(arena, h));
            try w.writeMap(@intCast(o.count()));
            var it = o.iterator();
            while (it.next()) |e| {
                try w.writeStr(e.key_ptr.*);
                try encode(w, arena, e.value_ptr.*);
            }
        },
        .float => return error.UnexpectedJsonFloat,
    }
}

/// Reads one value with the typed reads and checks it equals `v`.
fn expectDecodes(r: *Reader, arena: std.mem.Allocator, v: json.Value) !void {
    switch (v) {
        .null => try r.readNil(),
        .bool => |b| try testing.expectEqual(b, try r.readBool()),
        .integer => |i| try testing.expectEqual(i, try r.readInt(i64)),
        .number_string => |s| try testing.expectEqual(try std.fmt.parseInt(u64, s, 10), try r.readInt(u64)),
        .string => |s| try testing.expectEqualStrings(s, try r.readStr()),
        .array => |a| {
            try testing.expectEqual(a.items.len, try r.readArrayLen());
            for (a.items) |item| try expectDecodes(r, arena, item);
        },
        .object => |o| {
            if (special(v, "$f64")) |f| return testing.expectEqual(try std.fmt.parseFloat(f64, f), try r.readFloat());
            if (special(v, "$bin")) |h| return testing.expectEqualSlices(u8, try unhex(arena, h), try r.readBin());
            try testing.expectEqual(o.count(), try r.readMapLen());
            var it = o.iterator();
            while (it.next()) |e| {
                try testing.expectEqualStrings(e.key_ptr.*, try r.readKey());
                try expectDecodes(r, arena, e.value_ptr.*);
            }
        },
        .float => return error.UnexpectedJsonFloat,
    }
}

fn field(v: json.Value, key: []const u8) json.Value {
    return v.object.get(key).?;
}

test "canonical vectors: writer bytes, typed reads, copyValue, every truncation" {
    const parsed = try loadVectors("msgpack.json");
    defer parsed.deinit();
    var arena_state = std.heap.ArenaAllocator.init(gpa);
    defer arena_state.deinit();
    const arena = arena_state.allocator();

    const vectors = field(parsed.value, "canonical").array.items;
    try testing.expect(vectors.len >= 30);
    for (vectors) |vec| {
        const name = field(vec, "name").string;
        errdefer std.debug.print("vector: {s}\n", .{name});
        const want = try unhex(arena, field(vec, "hex").string);

        var w = Writer.init(gpa);
        defer w.deinit();
        try encode(&w, arena, field(vec, "value"));
        try testing.expectEqualSlices(u8, want, w.bytes());

        var r = Reader.init(want);
        try expectDecodes(&r, arena, field(vec, "value"));
        try r.finish();

        var copy = Writer.init(gpa);
        defer copy.deinit();
        var r2 = Reader.init(want);
        try copy.copyValue(&r2);
        try r2.finish();
        try testing.expectEqualSlices(u8, want, copy.bytes());

        // Every strict prefix of one encoded value is incomplete.
        for (0..want.len) |cut| {
            var rc = Reader.init(want[0..cut]);
            try testing.expectError(error.Truncated, rc.skip());
            try testing.expectEqual(@as(usize, 0), rc.pos);
        }
    }
}

test "decode-only vectors read back and re-encode canonically" {
    const parsed = try loadVectors("msgpack.json");
    defer parsed.deinit();
    var arena_state = std.heap.ArenaAllocator.init(gpa);
    defer arena_state.deinit();
    const arena = arena_state.allocator();

    for (field(parsed.value, "decode_only").array.items) |vec| {
        const bytes = try unhex(arena, field(vec, "hex").string);
        var r = Reader.init(bytes);
        try expectDecodes(&r, arena, field(vec, "value"));
        try r.finish();

        var canonical = Writer.init(gpa);
        defer canonical.deinit();
        try encode(&canonical, arena, field(vec, "value"));
        var copy = Writer.init(gpa);
        defer copy.deinit();
        var r2 = Reader.init(bytes);
        try copy.copyValue(&r2);
        try testing.expectEqualSlices(u8, canonical.bytes(), copy.bytes());
    }
}

fn refuses(bytes: []const u8) !void {
    var r = Reader.init(bytes);
    const result = if (r.skip()) r.finish() else |e| e;
    try testing.expect(std.meta.isError(result));
    var w = Writer.init(gpa);
    defer w.deinit();
    var r2 = Reader.init(bytes);
    const copied = if (w.copyValue(&r2)) r2.finish() else |e| e;
    try testing.expect(std.meta.isError(copied));
}

test "hostile vectors are refused" {
    const parsed = try loadVectors("hostile.json");
    defer parsed.deinit();
    var arena_state = std.heap.ArenaAllocator.init(gpa);
    defer arena_state.deinit();
    for (field(parsed.value, "hostile").array.items) |vec| {
        errdefer std.debug.print("vector: {s}\n", .{field(vec, "name").string});
        try refuses(try unhex(arena_state.allocator(), field(vec, "hex").string));
    }
}

test "huge declared lengths fail without reading past the end" {
    const cases = [_][]const u8{
        "\xc6\xff\xff\xff\xff\x00", // bin32 of 4 GiB
        "\xc5\xff\xff\x00", // bin16
        "\xda\x01\x00abc", // str16 of 256 with 3 bytes
        "\xdb\x7f\xff\xff\xff", // str32, no payload
        "\xde\xff\xff\xa1a\x01", // map16 of 65535 pairs
        "\xdc\x00\x03\x01\x02", // array16 of 3 with 2 items
        "\x85\xa1a\x01", // fixmap of 5 with one pair
        "\xcf\x00\x00", // uint64 cut short
        "\xcb\x3f\xf8", // float64 cut short
    };
    for (cases) |bytes| {
        var r = Reader.init(bytes);
        try testing.expectError(error.Truncated, r.skip());
        try testing.expectEqual(@as(usize, 0), r.pos);
    }
}

test "depth limit: max_depth containers pass, one more fails" {
    var buf: [200]u8 = undefined;
    for ([_]u8{ 0x91, 0x81 }) |open| {
        const nested = struct {
            fn build(out: []u8, tag: u8, n: usize) []const u8 {
                var i: usize = 0;
                for (0..n) |_| {
                    out[i] = tag;
                    i += 1;
                    if (tag == 0x81) {
                        @memcpy(out[i..][0..2], "\xa1k");
                        i += 2;
                    }
                }
                out[i] = 0xc0;
                return out[0 .. i + 1];
            }
        };
        var ok = Reader.init(nested.build(&buf, open, 64));
        ok.max_depth = 64;
        try ok.skip();
        try ok.finish();
        var deep = Reader.init(nested.build(&buf, open, 65));
        try testing.expectError(error.TooDeep, deep.skip());
        var w = Writer.init(gpa);
        defer w.deinit();
        deep.pos = 0;
        try testing.expectError(error.TooDeep, w.copyValue(&deep));
    }
}

test "typed reads: mismatches leave the reader in place, overflow is an error" {
    var r = Reader.init("\xcd\x01\x00"); // 256
    try testing.expectError(error.TypeMismatch, r.readStr());
    try testing.expectEqual(@as(usize, 0), r.pos);
    try testing.expectError(error.Overflow, r.readInt(u8));
    try testing.expectEqual(@as(usize, 0), r.pos);
    try testing.expectEqual(@as(i16, 256), try r.readInt(i16));

    var neg = Reader.init("\xff");
    try testing.expectError(error.Overflow, neg.readInt(u64));
    var big = Reader.init("\xcf\xff\xff\xff\xff\xff\xff\xff\xff");
    try testing.expectError(error.Overflow, big.readInt(i64));
    try testing.expectEqual(@as(u64, std.math.maxInt(u64)), try big.readInt(u64));

    var bad_utf8 = Reader.init("\xa2\xc3\x28");
    try testing.expectError(error.InvalidUtf8, bad_utf8.readStr());
    var ext = Reader.init("\xc7\x01\x05\x00");
    try testing.expectError(error.ExtensionType, ext.peek());
    try testing.expectError(error.ExtensionType, ext.next());
    var key = Reader.init("\x81\x01\x02");
    try testing.expectError(error.NonStringKey, key.skip());
}

test "lookup finds a key without moving the reader" {
    const doc = "\x83\xa1a\x01\xa1b\x92\xc3\xc2\xa1c\xa2hi";
    const r = Reader.init(doc);
    var b = (try r.lookup("b")).?;
    try testing.expectEqual(@as(u32, 2), try b.readArrayLen());
    try testing.expect(try b.readBool());
    try testing.expect(!try b.readBool());
    try b.finish();
    var c = (try r.lookup("c")).?;
    try testing.expectEqualStrings("hi", try c.readStr());
    try testing.expectEqual(@as(?Reader, null), try r.lookup("zz"));
    try testing.expectEqual(@as(usize, 0), r.pos);
    try testing.expectError(error.TypeMismatch, Reader.init("\x01").lookup("a"));
}

test "write: Zig values become maps, arrays, strs" {
    var w = Writer.init(gpa);
    defer w.deinit();
    const Hook = struct { hook: []const u8, priority: u8 = 50, pattern: ?[]const u8 = null };
    const hooks = [_]Hook{ .{ .hook = "greet" }, .{ .hook = "on_tag", .pattern = "x*" } };
    try w.write(.{ .abi_minor = 0, .hooks = &hooks, .kind = .plain, .ratio = 1.5, .none = @as(?u8, null) });
    const want = "\x84\xa9abi_minor\x00\xa5hooks\x92" ++
        "\x82\xa4hook\xa5greet\xa8priority\x32" ++
        "\x83\xa4hook\xa6on_tag\xa8priority\x32\xa7pattern\xa2x*" ++
        "\xa4kind\xa5plain\xa5ratio\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00";
    try testing.expectEqualSlices(u8, want, w.bytes());

    w.clear();
    try w.write(.{ 1, true, null, -33, std.math.maxInt(u64) });
    try testing.expectEqualSlices(u8, "\x95\x01\xc3\xc0\xd0\xdf\xcf\xff\xff\xff\xff\xff\xff\xff\xff", w.bytes());
}

test "writer reports out of memory instead of trapping" {
    var w = Writer.init(testing.failing_allocator);
    defer w.deinit();
    try testing.expectError(error.OutOfMemory, w.writeStr("hello"));
}

test "random bytes never trap the reader" {
    // Debug builds check every slice and cast, so a missed bound panics here.
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const rand = prng.random();
    // Bytes drawn from the headers most likely to declare lengths and nest.
    const alphabet = "\x00\x7f\x80\x81\x8f\x90\x91\x9f\xa0\xa1\xbf\xc0\xc1\xc2\xc4\xc5\xc6\xca\xcb\xcc\xcf\xd0\xd3\xd9\xda\xdb\xdc\xdd\xde\xdf\xe0\xff";
    var buf: [48]u8 = undefined;
    var w = Writer.init(gpa);
    defer w.deinit();
    for (0..50_000) |_| {
        const n = rand.uintLessThan(usize, buf.len);
        for (buf[0..n]) |*b| b.* = if (rand.boolean()) alphabet[rand.uintLessThan(usize, alphabet.len)] else rand.int(u8);
        var r = Reader.init(buf[0..n]);
        if (r.skip()) |_| try testing.expect(r.pos <= n) else |_| try testing.expectEqual(@as(usize, 0), r.pos);
        w.clear();
        var r2 = Reader.init(buf[0..n]);
        if (w.copyValue(&r2)) |_| {
            // A value that decodes re-encodes to something that decodes too.
            var again = Reader.init(w.bytes());
            try again.skip();
            try again.finish();
        } else |_| {}
    }
}
