//! The text rules of normalize-text, kept free of ABI code so they can be
//! unit-tested natively: `zig test src/normalize.zig`.
//!
//! One pass over the text, code point by code point: emoji first (a whole
//! emoji sequence is one unit), then whitespace, then lowercasing.

const std = @import("std");
const unicode = @import("unicode.zig");

const Allocator = std.mem.Allocator;
const decode = unicode.decode;
const encode = unicode.encode;
const emojiEnd = unicode.emojiEnd;
const isEmoji = unicode.isEmoji;
const isWhitespace = unicode.isWhitespace;
const toLower = unicode.toLower;

test {
    _ = unicode; // its tests run with these
}

pub const EmojiMode = enum { keep, strip, replace };

pub const Options = struct {
    lowercase: bool = false,
    /// Collapse each run of whitespace to one space and trim both ends.
    whitespace: bool = true,
    emoji: EmojiMode = .keep,
    /// Put in place of each emoji sequence when `emoji` is `.replace`.
    emoji_replacement: []const u8 = "?",
};

/// Returns the normalized text, allocated on `gpa`. Bytes that do not start
/// a valid UTF-8 sequence become U+FFFD, one per byte, so the result is
/// always valid UTF-8 (a MessagePack str must be).
pub fn normalize(gpa: Allocator, text: []const u8, opts: Options) Allocator.Error![]u8 {
    // The most one special step writes: a pending space, then a code point
    // or the emoji replacement.
    const step_max = 1 + @max(4, if (opts.emoji == .replace) opts.emoji_replacement.len else 0);
    var out: Output = .{ .gpa = gpa, .buf = try gpa.alloc(u8, text.len + step_max) };
    errdefer gpa.free(out.buf);
    // ASCII bytes this call may change: whitespace and/or capitals.
    const special: u8 = (if (opts.whitespace) space else 0) | (if (opts.lowercase) upper else 0);
    // A space is only written when something follows it: that trims the end,
    // and not setting it before the first output trims the start.
    var space_pending = false;
    // Every instruction costs fuel, so code points that stay as they are
    // are not copied one by one: they extend a run copied in one go.
    var run_start: usize = 0;
    var i: usize = 0;
    while (i < text.len) {
        const byte = text[i];
        if (byte < 0x80) {
            if (ascii_class[byte] & special == 0 or isLoneSpace(text, i, run_start, special)) {
                i += 1;
                continue;
            }
        } else if (byte >= 0xc2 and byte <= 0xdf and text.len - i >= 2 and text[i + 1] & 0xc0 == 0x80) {
            // Two-byte sequences (Latin, Greek, Cyrillic, ...) carry most
            // non-ASCII text; a bit table answers for them without decode().
            const cp = (@as(u11, byte & 0x1f) << 6) | (text[i + 1] & 0x3f);
            const bit = @as(u8, 1) << @as(u3, @truncate(cp));
            const cased = opts.lowercase and cased_2byte[cp >> 3] & bit != 0;
            const blank = opts.whitespace and spaces_2byte[cp >> 3] & bit != 0;
            if (!cased and !blank) {
                i += 2;
                continue;
            }
        } else if (byte >= 0xe3 and byte <= 0xef and byte != 0xed and text.len - i >= 3 and
            text[i + 1] & 0xc0 == 0x80 and text[i + 2] & 0xc0 == 0x80)
        {
            // U+3000-U+FFFF without the surrogates (CJK, kana, Hangul, ...)
            // holds no emoji and no cased letter; U+3000 is its one space.
            const ideographic_space = byte == 0xe3 and text[i + 1] == 0x80 and text[i + 2] == 0x80;
            if (!(opts.whitespace and ideographic_space)) {
                i += 3;
                continue;
            }
        } else {
            const d = decode(text, i);
            if (d.valid and !changes(d.cp, opts)) {
                i += d.len;
                continue;
            }
        }
        // A code point this call changes: copy the run before it first.
        if (run_start < i) {
            try out.reserve(1 + i - run_start);
            if (space_pending) out.push(' ');
            space_pending = false;
            out.pushSlice(text[run_start..i]);
        }
        try out.reserve(step_max);
        if (byte < 0x80) {
            // ASCII whitespace or a capital: no decoding needed.
            i += 1;
            if (ascii_class[byte] & special & space != 0) {
                space_pending = out.len > 0;
            } else {
                if (space_pending) out.push(' ');
                space_pending = false;
                out.push(std.ascii.toLower(byte));
            }
            run_start = i;
            continue;
        }
        const d = decode(text, i);
        if (opts.emoji != .keep and isEmoji(d.cp)) {
            i = emojiEnd(text, i);
            if (opts.emoji == .replace and opts.emoji_replacement.len > 0) {
                if (space_pending) out.push(' ');
                space_pending = false;
                out.pushSlice(opts.emoji_replacement);
            }
        } else if (opts.whitespace and isWhitespace(d.cp)) {
            i += d.len;
            space_pending = out.len > 0;
        } else {
            i += d.len;
            if (space_pending) out.push(' ');
            space_pending = false;
            var buf: [4]u8 = undefined;
            out.pushSlice(encode(if (opts.lowercase) toLower(d.cp) else d.cp, &buf));
        }
        run_start = i;
    }
    if (run_start < text.len) {
        try out.reserve(1 + text.len - run_start);
        if (space_pending) out.push(' ');
        out.pushSlice(text[run_start..]);
    }
    return gpa.realloc(out.buf, out.len);
}

/// True when this call would change valid code point `cp` (or, for an
/// emoji, the sequence it starts).
fn changes(cp: u21, opts: Options) bool {
    return (opts.emoji != .keep and isEmoji(cp)) or
        (opts.whitespace and isWhitespace(cp)) or
        (opts.lowercase and toLower(cp) != cp);
}

/// Bit tables over U+0000-U+07FF (the code points of one- and two-byte
/// sequences): whitespace, and code points that lowercasing changes.
const spaces_2byte = bitTable(isWhitespace);
const cased_2byte = bitTable(struct {
    fn f(cp: u21) bool {
        return toLower(cp) != cp;
    }
}.f);

fn bitTable(comptime pred: fn (u21) bool) [0x800 / 8]u8 {
    @setEvalBranchQuota(100_000);
    var t: [0x800 / 8]u8 = @splat(0);
    for (0..0x800) |cp| {
        if (pred(cp)) t[cp >> 3] |= 1 << (cp & 7);
    }
    return t;
}

/// A space between two characters that stay is already collapsed: it can
/// stay in the run. (Not at either end, which trimming removes.)
fn isLoneSpace(text: []const u8, i: usize, run_start: usize, special: u8) bool {
    return text[i] == ' ' and i > run_start and i + 1 < text.len and
        text[i + 1] < 0x80 and ascii_class[text[i + 1]] & special == 0;
}

/// A byte buffer with one capacity check per code point: ArrayList.append
/// checks per byte and, built for size, costs about 50 instructions of fuel
/// per byte; a 1 MiB text has to fit in one call's fuel budget.
const Output = struct {
    gpa: Allocator,
    buf: []u8,
    len: usize = 0,

    inline fn reserve(o: *Output, n: usize) Allocator.Error!void {
        if (o.buf.len - o.len < n) try o.grow(n);
    }

    fn grow(o: *Output, n: usize) Allocator.Error!void {
        o.buf = try o.gpa.realloc(o.buf, @max(o.buf.len * 2, o.len + n));
    }

    /// Callers have reserved room first.
    inline fn push(o: *Output, b: u8) void {
        o.buf[o.len] = b;
        o.len += 1;
    }

    inline fn pushSlice(o: *Output, s: []const u8) void {
        @memcpy(o.buf[o.len..][0..s.len], s);
        o.len += s.len;
    }
};

const space: u8 = 1;
const upper: u8 = 2;

/// For each ASCII byte: `space` (ASCII whitespace) and `upper` (A-Z) bits.
const ascii_class = classes: {
    var t: [128]u8 = @splat(0);
    for ("\t\n\x0b\x0c\r ") |c| t[c] = space;
    for ('A'..'Z' + 1) |c| t[c] = upper;
    break :classes t;
};

fn expectNormalized(want: []const u8, text: []const u8, opts: Options) !void {
    const got = try normalize(std.testing.allocator, text, opts);
    defer std.testing.allocator.free(got);
    try std.testing.expectEqualStrings(want, got);
}

test "whitespace collapses and trims, Unicode spaces included" {
    try expectNormalized("a b c", "  a \t\n b\u{00a0}\u{3000}\u{2003}c \r\n", .{});
    try expectNormalized("", " \t \u{2028} ", .{});
    try expectNormalized("  a  b ", "  a  b ", .{ .whitespace = false });
    try expectNormalized("a\u{200b}b", "a\u{200b}b", .{});
}

test "lowercase covers Latin-1, Latin Extended-A, Greek and Cyrillic" {
    const opts: Options = .{ .lowercase = true };
    try expectNormalized("HELLO ÀÉ", "HELLO ÀÉ", .{}); // off by default
    try expectNormalized("hello àéøþ ß ÿ", "HELLO ÀÉØÞ ß Ÿ", opts);
    try expectNormalized("āĳĺňŋži ı", "ĀĲĹŇŊŽİ ı", opts);
    try expectNormalized("άέήίόύώ αβγσσ ϊϋ", "ΆΈΉΊΌΎΏ ΑΒΓΣσ ΪΫ", opts);
    try expectNormalized("ѐёџ абвгдея ѡҋӏӂӑ", "ЀЁЏ АБВГДЕЯ ѠҊӀӁӐ", opts);
    try expectNormalized("× ÷", "× ÷", opts);
}

test "emoji: keep, strip and replace whole sequences" {
    const text = "hi 👋🏽 there 👨‍👩‍👧 ok ❤️ 🇫🇷!";
    try expectNormalized(text, text, .{});
    try expectNormalized("hi there ok !", text, .{ .emoji = .strip });
    try expectNormalized("hi <e> there <e> ok <e> <e>!", text, .{ .emoji = .replace, .emoji_replacement = "<e>" });
    try expectNormalized("a b", "😀 a 🚀 b 🤖", .{ .emoji = .strip });
    try expectNormalized("?a", "😀a", .{ .emoji = .replace });
    // A ZWJ or variation selector that follows no emoji is ordinary text.
    try expectNormalized("a\u{200d}b\u{fe0f}", "a\u{200d}b\u{fe0f}", .{ .emoji = .strip });
    // A lone regional indicator is removed on its own.
    try expectNormalized("x", "\u{1f1eb}x", .{ .emoji = .strip });
}

test "invalid UTF-8 becomes U+FFFD per byte" {
    try expectNormalized("a\u{fffd}\u{fffd}b", "a\xff\xfeb", .{});
    try expectNormalized("\u{fffd}\u{fffd}", "\xe2\x82", .{}); // cut-off sequence
    try expectNormalized("\u{fffd}\u{fffd}", "\xc0\xaf", .{}); // overlong '/'
    try expectNormalized("\u{fffd}\u{fffd}\u{fffd}", "\xed\xa0\x80", .{}); // surrogate
}

test "output grows past the input when replacements are longer" {
    const gpa = std.testing.allocator;
    const text = repeat("😀\xff", 300) ++ "end";
    const got = try normalize(gpa, text, .{ .emoji = .replace, .emoji_replacement = "<emoji-was-here>" });
    defer gpa.free(got);
    try std.testing.expectEqualStrings(repeat("<emoji-was-here>\u{fffd}", 300) ++ "end", got);
}

inline fn repeat(comptime s: []const u8, comptime n: usize) []const u8 {
    comptime {
        var r: []const u8 = "";
        for (0..n) |_| r = r ++ s;
        return r;
    }
}

test "random input never breaks a bound (Debug checks every access)" {
    const gpa = std.testing.allocator;
    var prng = std.Random.DefaultPrng.init(42);
    const rand = prng.random();
    const letters = [_][]const u8{ "a", "Z", " ", "\t", "\u{3000}", "\u{2003}", "É", "Σ", "Ж", "你", "\u{feff}" };
    const emoji = [_][]const u8{ "😀", "☀", "\u{200d}", "\u{fe0f}", "\u{1f3fd}", "\u{1f1eb}" };
    const broken = [_][]const u8{ "\xff", "\xe2\x82", "\xe3\x80", "\xed\xa0\x80", "\xef\xbf", "\xf0\x9f" };
    const pieces = letters ++ emoji ++ broken;
    var text: std.ArrayList(u8) = .empty;
    defer text.deinit(gpa);
    for (0..3000) |_| {
        text.clearRetainingCapacity();
        for (0..rand.uintLessThan(usize, 24)) |_| try text.appendSlice(gpa, pieces[rand.uintLessThan(usize, pieces.len)]);
        const opts: Options = .{
            .lowercase = rand.boolean(),
            .whitespace = rand.boolean(),
            .emoji = rand.enumValue(EmojiMode),
            .emoji_replacement = if (rand.boolean()) "" else "[emoji]",
        };
        const got = try normalize(gpa, text.items, opts);
        defer gpa.free(got);
        try std.testing.expect(std.unicode.utf8ValidateSlice(got));
        const want = try reference(gpa, text.items, opts);
        defer gpa.free(want);
        try std.testing.expectEqualStrings(want, got);
        // Normalizing twice changes nothing more.
        const again = try normalize(gpa, got, opts);
        defer gpa.free(again);
        if (opts.emoji != .replace) try std.testing.expectEqualStrings(got, again);
    }
}

/// The rules applied one code point at a time, with no runs: the oracle the
/// fast version must agree with.
fn reference(gpa: Allocator, text: []const u8, opts: Options) ![]u8 {
    var out: std.ArrayList(u8) = .empty;
    errdefer out.deinit(gpa);
    var space_pending = false;
    var i: usize = 0;
    while (i < text.len) {
        const d = decode(text, i);
        if (opts.emoji != .keep and isEmoji(d.cp)) {
            i = emojiEnd(text, i);
            if (opts.emoji == .strip or opts.emoji_replacement.len == 0) continue;
        } else {
            i += d.len;
            if (opts.whitespace and isWhitespace(d.cp)) {
                space_pending = out.items.len > 0;
                continue;
            }
        }
        if (space_pending) try out.append(gpa, ' ');
        space_pending = false;
        if (opts.emoji != .keep and isEmoji(d.cp)) {
            try out.appendSlice(gpa, opts.emoji_replacement);
        } else {
            var buf: [4]u8 = undefined;
            try out.appendSlice(gpa, encode(if (opts.lowercase) toLower(d.cp) else d.cp, &buf));
        }
    }
    return out.toOwnedSlice(gpa);
}
