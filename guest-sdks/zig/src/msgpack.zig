//! MessagePack as the ABI uses it (SPEC section 2): a bounds-checked pull
//! reader and a growable writer that always picks the smallest encoding, so
//! its bytes equal the canonical bytes in abi/vectors/msgpack.json.
//!
//! The reader never trusts a declared length: every read is checked against
//! the bytes that are left, so hostile input ends in an error, never in a read
//! past the end (ReleaseSmall has no safety checks to catch one).

const std = @import("std");
const abi = @import("abi.zig");

const Allocator = std.mem.Allocator;

pub const ReadError = error{
    /// A value, or a length it declares, runs past the end of the input.
    Truncated,
    /// Containers nest deeper than the reader's `max_depth`.
    TooDeep,
    /// 0xc1, the one byte MessagePack never uses.
    ReservedByte,
    /// ext / fixext: the ABI refuses extension types.
    ExtensionType,
    /// A str whose bytes are not valid UTF-8.
    InvalidUtf8,
    /// A map key that is not a str.
    NonStringKey,
    /// The next value is not of the type asked for.
    TypeMismatch,
    /// An integer that does not fit the Zig type asked for.
    Overflow,
    /// Bytes left over after the one value the input should hold.
    TrailingBytes,
};

pub const WriteError = error{
    OutOfMemory,
    /// A str, bin or container longer than MessagePack's 32-bit lengths.
    TooLong,
};

/// One decoded header. Containers carry their item count (a map counts
/// pairs); the reader then yields their items one by one.
pub const Token = union(enum) {
    nil,
    bool: bool,
    /// Every integer that fits an i64, whatever width it was encoded with.
    int: i64,
    /// Only integers above maxInt(i64).
    uint: u64,
    /// float32 is widened to f64.
    float: f64,
    str: []const u8,
    bin: []const u8,
    array: u32,
    map: u32,
};

pub const Kind = std.meta.Tag(Token);

pub const Reader = struct {
    bytes: []const u8,
    pos: usize = 0,
    /// Containers deeper than this are refused by `skip`, `rawValue` and
    /// `Writer.copyValue`, the only reads that descend on their own.
    max_depth: u32 = abi.limits.max_msgpack_depth,

    pub fn init(bytes: []const u8) Reader {
        return .{ .bytes = bytes };
    }

    /// Fails unless every byte has been read: an input holds one value.
    pub fn finish(r: *const Reader) ReadError!void {
        if (r.pos != r.bytes.len) return error.TrailingBytes;
    }

    /// The kind of the next value, without consuming it.
    pub fn peek(r: *const Reader) ReadError!Kind {
        if (r.pos >= r.bytes.len) return error.Truncated;
        return switch (r.bytes[r.pos]) {
            0x00...0x7f, 0xcc...0xd3, 0xe0...0xff => .int,
            0x80...0x8f, 0xde, 0xdf => .map,
            0x90...0x9f, 0xdc, 0xdd => .array,
            0xa0...0xbf, 0xd9...0xdb => .str,
            0xc0 => .nil,
            0xc2, 0xc3 => .bool,
            0xc4...0xc6 => .bin,
            0xca, 0xcb => .float,
            0xc1 => error.ReservedByte,
            0xc7...0xc9, 0xd4...0xd8 => error.ExtensionType,
        };
    }

    /// Reads one header (and the payload of a str or bin). On error the
    /// reader has not moved.
    pub fn next(r: *Reader) ReadError!Token {
        const start = r.pos;
        errdefer r.pos = start;
        const b = (try r.take(1))[0];
        return switch (b) {
            0x00...0x7f => .{ .int = b },
            0xe0...0xff => .{ .int = @as(i8, @bitCast(b)) },
            0x80...0x8f => .{ .map = try r.items(b & 0x0f, 2) },
            0x90...0x9f => .{ .array = try r.items(b & 0x0f, 1) },
            0xa0...0xbf => .{ .str = try r.utf8(b & 0x1f) },
            0xc0 => .nil,
            0xc2, 0xc3 => .{ .bool = b == 0xc3 },
            0xc4 => .{ .bin = try r.take(try r.int(u8)) },
            0xc5 => .{ .bin = try r.take(try r.int(u16)) },
            0xc6 => .{ .bin = try r.take(try r.int(u32)) },
            0xca => .{ .float = @as(f32, @bitCast(try r.int(u32))) },
            0xcb => .{ .float = @bitCast(try r.int(u64)) },
            0xcc => .{ .int = try r.int(u8) },
            0xcd => .{ .int = try r.int(u16) },
            0xce => .{ .int = try r.int(u32) },
            0xcf => blk: {
                const v = try r.int(u64);
                break :blk if (std.math.cast(i64, v)) |s| .{ .int = s } else .{ .uint = v };
            },
            0xd0 => .{ .int = try r.int(i8) },
            0xd1 => .{ .int = try r.int(i16) },
            0xd2 => .{ .int = try r.int(i32) },
            0xd3 => .{ .int = try r.int(i64) },
            0xd9 => .{ .str = try r.utf8(try r.int(u8)) },
            0xda => .{ .str = try r.utf8(try r.int(u16)) },
            0xdb => .{ .str = try r.utf8(try r.int(u32)) },
            0xdc => .{ .array = try r.items(try r.int(u16), 1) },
            0xdd => .{ .array = try r.items(try r.int(u32), 1) },
            0xde => .{ .map = try r.items(try r.int(u16), 2) },
            0xdf => .{ .map = try r.items(try r.int(u32), 2) },
            0xc1 => error.ReservedByte,
            0xc7...0xc9, 0xd4...0xd8 => error.ExtensionType,
        };
    }

    pub fn readNil(r: *Reader) ReadError!void {
        _ = try r.expect(.nil);
    }

    pub fn readBool(r: *Reader) ReadError!bool {
        return (try r.expect(.bool)).bool;
    }

    /// Any integer encoding; `error.Overflow` when the value does not fit T.
    pub fn readInt(r: *Reader, comptime T: type) ReadError!T {
        const start = r.pos;
        errdefer r.pos = start;
        return switch (try r.next()) {
            .int => |v| std.math.cast(T, v) orelse error.Overflow,
            .uint => |v| std.math.cast(T, v) orelse error.Overflow,
            else => error.TypeMismatch,
        };
    }

    /// float32, float64, or any integer (converted).
    pub fn readFloat(r: *Reader) ReadError!f64 {
        const start = r.pos;
        errdefer r.pos = start;
        return switch (try r.next()) {
            .float => |v| v,
            .int => |v| @floatFromInt(v),
            .uint => |v| @floatFromInt(v),
            else => error.TypeMismatch,
        };
    }

    /// The str's bytes, already checked to be UTF-8; they point into the input.
    pub fn readStr(r: *Reader) ReadError![]const u8 {
        return (try r.expect(.str)).str;
    }

    pub fn readBin(r: *Reader) ReadError![]const u8 {
        return (try r.expect(.bin)).bin;
    }

    /// An array header; the caller then reads that many values.
    pub fn readArrayLen(r: *Reader) ReadError!u32 {
        return (try r.expect(.array)).array;
    }

    /// A map header; the caller then reads that many key/value pairs.
    pub fn readMapLen(r: *Reader) ReadError!u32 {
        return (try r.expect(.map)).map;
    }

    /// A map key: like `readStr`, but names the problem `NonStringKey`.
    pub fn readKey(r: *Reader) ReadError![]const u8 {
        return r.readStr() catch |e| switch (e) {
            error.TypeMismatch => error.NonStringKey,
            else => e,
        };
    }

    /// Steps over one whole value, checking everything inside it.
    pub fn skip(r: *Reader) ReadError!void {
        const start = r.pos;
        errdefer r.pos = start;
        try r.skipNested(0);
    }

    /// The encoded bytes of the next whole value (checked), pointing into the input.
    pub fn rawValue(r: *Reader) ReadError![]const u8 {
        const start = r.pos;
        try r.skip();
        return r.bytes[start..r.pos];
    }

    /// Finds `key` in the map the reader is on, without moving this reader.
    /// Returns a reader over exactly that key's value, or null.
    pub fn lookup(r: Reader, key: []const u8) ReadError!?Reader {
        var it = r;
        const pairs = try it.readMapLen();
        for (0..pairs) |_| {
            const k = try it.readKey();
            if (std.mem.eql(u8, k, key)) {
                return .{ .bytes = try it.rawValue(), .max_depth = r.max_depth };
            }
            try it.skip();
        }
        return null;
    }

    fn skipNested(r: *Reader, depth: u32) ReadError!void {
        switch (try r.next()) {
            .array => |n| {
                if (depth >= r.max_depth) return error.TooDeep;
                for (0..n) |_| try r.skipNested(depth + 1);
            },
            .map => |n| {
                if (depth >= r.max_depth) return error.TooDeep;
                for (0..n) |_| {
                    _ = try r.readKey();
                    try r.skipNested(depth + 1);
                }
            },
            else => {},
        }
    }

    fn expect(r: *Reader, comptime kind: Kind) ReadError!Token {
        const start = r.pos;
        const token = try r.next();
        if (token != kind) {
            r.pos = start;
            return error.TypeMismatch;
        }
        return token;
    }

    fn take(r: *Reader, n: usize) ReadError![]const u8 {
        // pos <= bytes.len always holds, so the subtraction cannot wrap.
        if (n > r.bytes.len - r.pos) return error.Truncated;
        defer r.pos += n;
        return r.bytes[r.pos..][0..n];
    }

    fn int(r: *Reader, comptime T: type) ReadError!T {
        const n = @sizeOf(T);
        return std.mem.readInt(T, (try r.take(n))[0..n], .big);
    }

    fn utf8(r: *Reader, n: usize) ReadError![]const u8 {
        const s = try r.take(n);
        if (!std.unicode.utf8ValidateSlice(s)) return error.InvalidUtf8;
        return s;
    }

    /// Refuses a count that cannot fit in the bytes left (every item takes at
    /// least one byte), so a hostile "4 billion items" fails at once instead
    /// of after looping over the input.
    fn items(r: *Reader, count: u32, bytes_per_item: u64) ReadError!u32 {
        if (count * bytes_per_item > r.bytes.len - r.pos) return error.Truncated;
        return count;
    }
};

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

/// The encoding of a str known at compile time, for constant documents.
pub fn comptimeStr(comptime s: []const u8) []const u8 {
    comptime {
        const head: []const u8 = if (s.len < 32)
            &.{0xa0 | @as(u8, s.len)}
        else if (s.len <= 0xff)
            &.{ 0xd9, @as(u8, s.len) }
        else
            @compileError("comptimeStr is for short strings");
        const out = head[0..head.len].* ++ s[0..s.len].*;
        return &out;
    }
}
