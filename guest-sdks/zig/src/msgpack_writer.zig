//! The MessagePack writer: appends to a growable buffer, always in the
//! smallest encoding (the canonical bytes of abi/vectors/msgpack.json).

const std = @import("std");
const msgpack = @import("msgpack.zig");

const Allocator = std.mem.Allocator;
const Reader = msgpack.Reader;
const ReadError = msgpack.ReadError;
const WriteError = msgpack.WriteError;
const Token = msgpack.Token;

/// Appends MessagePack to a growable buffer on `gpa`, always in the smallest
/// encoding. Write exactly one top-level value per document.
pub const Writer = struct {
    gpa: Allocator,
    buf: std.ArrayList(u8) = .empty,

    pub fn init(gpa: Allocator) Writer {
        return .{ .gpa = gpa };
    }

    pub fn deinit(w: *Writer) void {
        w.buf.deinit(w.gpa);
    }

    /// Everything written so far.
    pub fn bytes(w: *const Writer) []const u8 {
        return w.buf.items;
    }

    /// Forgets the contents but keeps the capacity for the next document.
    pub fn clear(w: *Writer) void {
        w.buf.clearRetainingCapacity();
    }

    pub fn writeNil(w: *Writer) WriteError!void {
        try w.put(&.{0xc0});
    }

    pub fn writeBool(w: *Writer, v: bool) WriteError!void {
        try w.put(&.{if (v) 0xc3 else 0xc2});
    }

    /// Any Zig integer up to 64 bits, or a comptime_int.
    pub fn writeInt(w: *Writer, v: anytype) WriteError!void {
        const T = @TypeOf(v);
        if (T == comptime_int) {
            return if (v < 0) w.writeNegative(v) else w.writeUnsigned(v);
        }
        const info = @typeInfo(T).int;
        if (info.bits > 64) @compileError("msgpack integers have at most 64 bits");
        if (info.signedness == .unsigned) return w.writeUnsigned(v);
        return if (v < 0) w.writeNegative(v) else w.writeUnsigned(@intCast(v));
    }

    /// Always float64: the ABI's writers never emit float32.
    pub fn writeFloat(w: *Writer, v: f64) WriteError!void {
        try w.header(0xcb, u64, @bitCast(v));
    }

    /// `s` must be UTF-8; the host refuses a document with an invalid str.
    pub fn writeStr(w: *Writer, s: []const u8) WriteError!void {
        const n = std.math.cast(u32, s.len) orelse return error.TooLong;
        if (n < 32) {
            try w.put(&.{0xa0 | @as(u8, @intCast(n))});
        } else try w.sized(n, .{ 0xd9, 0xda, 0xdb });
        try w.put(s);
    }

    pub fn writeBin(w: *Writer, b: []const u8) WriteError!void {
        const n = std.math.cast(u32, b.len) orelse return error.TooLong;
        try w.sized(n, .{ 0xc4, 0xc5, 0xc6 });
        try w.put(b);
    }

    /// An array header; write `n` values after it.
    pub fn writeArray(w: *Writer, n: u32) WriteError!void {
        if (n < 16) return w.put(&.{0x90 | @as(u8, @intCast(n))});
        if (n <= 0xffff) return w.header(0xdc, u16, @intCast(n));
        try w.header(0xdd, u32, n);
    }

    /// A map header; write `n` key/value pairs (keys as str) after it.
    pub fn writeMap(w: *Writer, n: u32) WriteError!void {
        if (n < 16) return w.put(&.{0x80 | @as(u8, @intCast(n))});
        if (n <= 0xffff) return w.header(0xde, u16, @intCast(n));
        try w.header(0xdf, u32, n);
    }

    /// Appends bytes that already are one encoded value (e.g. from `rawValue`).
    pub fn writeRaw(w: *Writer, encoded: []const u8) WriteError!void {
        try w.put(encoded);
    }

    pub fn writeToken(w: *Writer, token: Token) WriteError!void {
        switch (token) {
            .nil => try w.writeNil(),
            .bool => |v| try w.writeBool(v),
            .int => |v| try w.writeInt(v),
            .uint => |v| try w.writeInt(v),
            .float => |v| try w.writeFloat(v),
            .str => |v| try w.writeStr(v),
            .bin => |v| try w.writeBin(v),
            .array => |n| try w.writeArray(n),
            .map => |n| try w.writeMap(n),
        }
    }

    /// Decodes the reader's next whole value and writes it again in the
    /// smallest encoding: the result is the canonical form of the same value.
    pub fn copyValue(w: *Writer, r: *Reader) (ReadError || WriteError)!void {
        const start = r.pos;
        errdefer r.pos = start;
        try w.copyNested(r, 0);
    }

    /// Writes a Zig value: null/void as nil, bool, integers, floats, strings
    /// ([]const u8, string literals) as str, enums as their tag name as str,
    /// slices, arrays and tuples as arrays, structs as maps keyed by field
    /// name. A struct field whose value is null is left out of the map, so
    /// optional fields map to optional keys.
    pub fn write(w: *Writer, value: anytype) WriteError!void {
        const T = @TypeOf(value);
        switch (@typeInfo(T)) {
            .null, .void => try w.writeNil(),
            .bool => try w.writeBool(value),
            .int, .comptime_int => try w.writeInt(value),
            .float, .comptime_float => try w.writeFloat(value),
            .@"enum", .enum_literal => try w.writeStr(@tagName(value)),
            .optional => if (value) |v| try w.write(v) else try w.writeNil(),
            .pointer => |p| switch (p.size) {
                .one => try w.write(value.*),
                .slice => if (p.child == u8) try w.writeStr(value) else try w.writeList(value),
                else => @compileError("msgpack: cannot write " ++ @typeName(T)),
            },
            .array => |a| if (a.child == u8) try w.writeStr(&value) else try w.writeList(&value),
            .@"struct" => |s| if (s.is_tuple) {
                try w.writeArray(s.field_names.len);
                inline for (s.field_names) |name| try w.write(@field(value, name));
            } else {
                var present: u32 = 0;
                inline for (s.field_names) |name| {
                    if (!isNull(@field(value, name))) present += 1;
                }
                try w.writeMap(present);
                inline for (s.field_names) |name| {
                    if (!isNull(@field(value, name))) {
                        try w.writeStr(name);
                        try w.write(@field(value, name));
                    }
                }
            },
            else => @compileError("msgpack: cannot write " ++ @typeName(T)),
        }
    }

    fn writeList(w: *Writer, list: anytype) WriteError!void {
        try w.writeArray(std.math.cast(u32, list.len) orelse return error.TooLong);
        for (list) |item| try w.write(item);
    }

    fn copyNested(w: *Writer, r: *Reader, depth: u32) (ReadError || WriteError)!void {
        const token = try r.next();
        try w.writeToken(token);
        switch (token) {
            .array => |n| {
                if (depth >= r.max_depth) return error.TooDeep;
                for (0..n) |_| try w.copyNested(r, depth + 1);
            },
            .map => |n| {
                if (depth >= r.max_depth) return error.TooDeep;
                for (0..n) |_| {
                    try w.writeStr(try r.readKey());
                    try w.copyNested(r, depth + 1);
                }
            },
            else => {},
        }
    }

    fn writeUnsigned(w: *Writer, v: u64) WriteError!void {
        if (v <= 0x7f) return w.put(&.{@intCast(v)});
        if (v <= 0xff) return w.header(0xcc, u8, @intCast(v));
        if (v <= 0xffff) return w.header(0xcd, u16, @intCast(v));
        if (v <= 0xffff_ffff) return w.header(0xce, u32, @intCast(v));
        try w.header(0xcf, u64, v);
    }

    fn writeNegative(w: *Writer, v: i64) WriteError!void {
        if (v >= -32) return w.put(&.{@bitCast(@as(i8, @intCast(v)))});
        if (v >= std.math.minInt(i8)) return w.header(0xd0, i8, @intCast(v));
        if (v >= std.math.minInt(i16)) return w.header(0xd1, i16, @intCast(v));
        if (v >= std.math.minInt(i32)) return w.header(0xd2, i32, @intCast(v));
        try w.header(0xd3, i64, v);
    }

    /// The 8-, 16- or 32-bit length form of a str or bin header.
    fn sized(w: *Writer, n: u32, tags: [3]u8) WriteError!void {
        if (n <= 0xff) return w.header(tags[0], u8, @intCast(n));
        if (n <= 0xffff) return w.header(tags[1], u16, @intCast(n));
        try w.header(tags[2], u32, n);
    }

    fn header(w: *Writer, tag: u8, comptime T: type, v: T) WriteError!void {
        var b: [1 + @sizeOf(T)]u8 = undefined;
        b[0] = tag;
        std.mem.writeInt(T, b[1..], v, .big);
        try w.put(&b);
    }

    fn put(w: *Writer, s: []const u8) WriteError!void {
        try w.buf.appendSlice(w.gpa, s);
    }
};

fn isNull(v: anytype) bool {
    return switch (@typeInfo(@TypeOf(v))) {
        .null => true,
        .optional => v == null,
        else => false,
    };
}
