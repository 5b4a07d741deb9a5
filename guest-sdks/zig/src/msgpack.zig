//! MessagePack as the ABI uses it (SPEC section 2): a bounds-checked pull
//! reader, and (in msgpack_writer.zig) a growable writer that always picks
//! the smallest encoding, so its bytes equal the canonical bytes in
//! abi/vectors/msgpack.json.
//!
//! The reader never trusts a declared length: every read is checked against
//! the bytes that are left, so hostile input ends in an error, never in a read
//! past the end (ReleaseSmall has no safety checks to catch one).

const std = @import("std");
const abi = @import("abi.zig");

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

/// Appends MessagePack to a growable buffer (msgpack_writer.zig).
pub const Writer = @import("msgpack_writer.zig").Writer;

pub const Reader = struct {
    bytes: []const u8,
    pos: usize = 0,
    /// Containers deeper than this are refused by `skip`, `rawValue` and
    /// `Writer.copyValue`, the only reads that descend on their own.
    max_depth: u32 = abi.limits.max_msgpack_depth,
    /// Set when `bytes` came from `rawValue`, which has already checked every
    /// str inside: reading them again need not pay for UTF-8 checks twice.
    utf8_checked: bool = false,

    pub fn init(bytes: []const u8) Reader {
        return .{ .bytes = bytes };
    }

    /// A reader on bytes that `rawValue` returned (and so already checked).
    pub fn initChecked(raw_value: []const u8) Reader {
        return .{ .bytes = raw_value, .utf8_checked = true };
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
                return .{ .bytes = try it.rawValue(), .max_depth = r.max_depth, .utf8_checked = true };
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
        if (!r.utf8_checked and !validUtf8(s)) return error.InvalidUtf8;
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

/// UTF-8 check per Unicode table 3-7 (no overlongs, surrogates or code
/// points above U+10FFFF). std.unicode.utf8ValidateSlice goes byte by byte
/// on wasm32 (no SIMD) at about 20 instructions of fuel per byte, most of a
/// call's budget for a 1 MiB string; here ASCII goes a 64-bit word at a
/// time and other sequences take one table lookup.
fn validUtf8(s: []const u8) bool {
    var i: usize = 0;
    while (i < s.len) {
        // A plain unaligned load: std.mem.readInt becomes a byte loop in ReleaseSmall.
        while (s.len - i >= 8 and @as(*align(1) const u64, @ptrCast(s[i..][0..8])).* & 0x8080_8080_8080_8080 == 0) i += 8;
        while (i < s.len and s[i] < 0x80) i += 1;
        while (i < s.len and s[i] >= 0x80) {
            // Two-byte sequences first: Latin, Greek and Cyrillic text.
            if (s[i] >= 0xc2 and s[i] <= 0xdf) {
                if (s.len - i < 2 or s[i + 1] & 0xc0 != 0x80) return false;
                i += 2;
                continue;
            }
            const lead = utf8_leads[s[i]];
            if (lead.len == 0 or lead.len > s.len - i) return false;
            if (s[i + 1] < lead.lo or s[i + 1] > lead.hi) return false;
            for (s[i + 2 .. i + lead.len]) |c| {
                if (c & 0xc0 != 0x80) return false;
            }
            i += lead.len;
        }
    }
    return true;
}

/// For each lead byte: sequence length (0 = never a lead) and the range the
/// second byte must fall in.
const utf8_leads = leads: {
    const Lead = struct { len: u8 = 0, lo: u8 = 0, hi: u8 = 0 };
    var t: [256]Lead = @splat(.{});
    for (0xc2..0xe0) |b| t[b] = .{ .len = 2, .lo = 0x80, .hi = 0xbf };
    for (0xe0..0xf0) |b| t[b] = .{ .len = 3, .lo = 0x80, .hi = 0xbf };
    t[0xe0].lo = 0xa0; // overlong below U+0800
    t[0xed].hi = 0x9f; // surrogates
    for (0xf0..0xf5) |b| t[b] = .{ .len = 4, .lo = 0x80, .hi = 0xbf };
    t[0xf0].lo = 0x90; // overlong below U+10000
    t[0xf4].hi = 0x8f; // above U+10FFFF
    break :leads t;
};

/// The encoding of a str known at compile time, for constant documents.
pub inline fn comptimeStr(comptime s: []const u8) []const u8 {
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
