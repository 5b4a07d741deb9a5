//! The Unicode knowledge normalize-text needs, as code point ranges:
//! whitespace, a simple lowercase mapping, emoji, and a UTF-8 decoder that
//! turns invalid bytes into U+FFFD instead of failing.

const std = @import("std");

/// Unicode White_Space, plus nothing else (U+200B and U+FEFF are not
/// whitespace and are kept).
pub fn isWhitespace(cp: u21) bool {
    return switch (cp) {
        0x09...0x0d, 0x20, 0x85, 0xa0, 0x1680, 0x2000...0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000 => true,
        else => false,
    };
}

/// Simple (one code point to one code point) lowercase mapping for ASCII,
/// Latin-1 Supplement, Latin Extended-A, basic Greek (U+0386-U+03AB) and
/// Cyrillic (U+0400-U+04FF). Σ always becomes σ, never final ς; İ becomes i.
pub fn toLower(cp: u21) u21 {
    return switch (cp) {
        'A'...'Z', 0xc0...0xd6, 0xd8...0xde => cp + 0x20,
        // Latin Extended-A pairs capital/small; which of the two is even
        // changes from block to block.
        0x0100...0x012f, 0x0132...0x0137, 0x014a...0x0177 => cp | 1,
        0x0139...0x0148, 0x0179...0x017e => cp + (cp & 1),
        0x0130 => 'i',
        0x0178 => 0xff,
        0x0386 => 0x03ac,
        0x0388...0x038a => cp + 0x25,
        0x038c => 0x03cc,
        0x038e, 0x038f => cp + 0x3f,
        0x0391...0x03a1, 0x03a3...0x03ab => cp + 0x20,
        0x0400...0x040f => cp + 0x50,
        0x0410...0x042f => cp + 0x20,
        0x0460...0x0481, 0x048a...0x04bf, 0x04d0...0x04ff => cp | 1,
        0x04c0 => 0x04cf,
        0x04c1...0x04ce => cp + (cp & 1),
        else => cp,
    };
}

/// A code point that starts an emoji: Misc Symbols, Dingbats, regional
/// indicators, Misc Symbols and Pictographs (with the skin tones),
/// Emoticons, Transport and Map, Supplemental Symbols and Pictographs, and
/// Symbols and Pictographs Extended-A.
pub fn isEmoji(cp: u21) bool {
    return switch (cp) {
        0x2600...0x27bf, 0x1f1e6...0x1f1ff, 0x1f300...0x1f64f, 0x1f680...0x1f6ff, 0x1f900...0x1f9ff, 0x1fa70...0x1faff => true,
        else => false,
    };
}

/// Code points that only modify the emoji before them: variation selectors
/// 15 and 16, skin tones, the combining keycap and the tag characters.
fn isEmojiModifier(cp: u21) bool {
    return switch (cp) {
        0xfe0e, 0xfe0f, 0x1f3fb...0x1f3ff, 0x20e3, 0xe0020...0xe007f => true,
        else => false,
    };
}

fn isRegionalIndicator(cp: u21) bool {
    return cp >= 0x1f1e6 and cp <= 0x1f1ff;
}

/// Where the emoji sequence starting at `start` ends: the emoji, its
/// modifiers, and further emoji joined by U+200D (ZWJ); two regional
/// indicators make one flag.
pub fn emojiEnd(text: []const u8, start: usize) usize {
    const first = decode(text, start);
    var i = start + first.len;
    if (isRegionalIndicator(first.cp)) {
        if (i < text.len and isRegionalIndicator(decode(text, i).cp)) i += decode(text, i).len;
        return i;
    }
    while (i < text.len) {
        const d = decode(text, i);
        if (isEmojiModifier(d.cp)) {
            i += d.len;
        } else if (d.cp == 0x200d and i + d.len < text.len and isEmoji(decode(text, i + d.len).cp)) {
            i += d.len + decode(text, i + d.len).len;
        } else break;
    }
    return i;
}

pub const Decoded = struct { cp: u21, len: u3, valid: bool };

/// Decodes the code point at `i`; an invalid or cut-off sequence decodes as
/// U+FFFD of length 1, so decoding resumes at the next byte.
pub fn decode(s: []const u8, i: usize) Decoded {
    const invalid: Decoded = .{ .cp = 0xfffd, .len = 1, .valid = false };
    const lead = s[i];
    if (lead < 0x80) return .{ .cp = lead, .len = 1, .valid = true };
    const len: u3, const lo: u8, const hi: u8 = switch (lead) {
        0xc2...0xdf => .{ 2, 0x80, 0xbf },
        0xe0 => .{ 3, 0xa0, 0xbf },
        0xe1...0xec, 0xee, 0xef => .{ 3, 0x80, 0xbf },
        0xed => .{ 3, 0x80, 0x9f },
        0xf0 => .{ 4, 0x90, 0xbf },
        0xf1...0xf3 => .{ 4, 0x80, 0xbf },
        0xf4 => .{ 4, 0x80, 0x8f },
        else => return invalid,
    };
    if (len > s.len - i or s[i + 1] < lo or s[i + 1] > hi) return invalid;
    var cp: u21 = lead & (@as(u8, 0x7f) >> len);
    for (s[i + 1 .. i + len]) |c| {
        if (c & 0xc0 != 0x80) return invalid;
        cp = (cp << 6) | (c & 0x3f);
    }
    return .{ .cp = cp, .len = len, .valid = true };
}

pub fn encode(cp: u21, buf: *[4]u8) []const u8 {
    if (cp < 0x80) {
        buf[0] = @intCast(cp);
        return buf[0..1];
    }
    if (cp < 0x800) {
        buf[0] = @intCast(0xc0 | (cp >> 6));
        buf[1] = @intCast(0x80 | (cp & 0x3f));
        return buf[0..2];
    }
    if (cp < 0x10000) {
        buf[0] = @intCast(0xe0 | (cp >> 12));
        buf[1] = @intCast(0x80 | ((cp >> 6) & 0x3f));
        buf[2] = @intCast(0x80 | (cp & 0x3f));
        return buf[0..3];
    }
    buf[0] = @intCast(0xf0 | (cp >> 18));
    buf[1] = @intCast(0x80 | ((cp >> 12) & 0x3f));
    buf[2] = @intCast(0x80 | ((cp >> 6) & 0x3f));
    buf[3] = @intCast(0x80 | (cp & 0x3f));
    return buf[0..4];
}

test "decode and encode agree on every code point" {
    var buf: [4]u8 = undefined;
    var cp: u21 = 0;
    while (cp <= 0x10ffff) : (cp += 1) {
        if (cp >= 0xd800 and cp <= 0xdfff) continue;
        const bytes = encode(cp, &buf);
        const d = decode(bytes, 0);
        try std.testing.expect(d.valid and d.cp == cp and d.len == bytes.len);
    }
}

test "lowercase mapping agrees with the case pairs it claims" {
    try std.testing.expectEqual(@as(u21, 'a'), toLower('A'));
    try std.testing.expectEqual(@as(u21, 0xff), toLower(0x178)); // Ÿ
    try std.testing.expectEqual(@as(u21, 0x3c3), toLower(0x3a3)); // Σ
    try std.testing.expectEqual(@as(u21, 0x450), toLower(0x400)); // Ѐ
    try std.testing.expectEqual(@as(u21, 0x4cf), toLower(0x4c0)); // Ӏ
    // Lowercase letters, and code points outside the ranges, stay.
    for ([_]u21{ 'a', 0xdf, 0xd7, 0x131, 0x138, 0x149, 0x17f, 0x3c2, 0x430, 0x4cf, 0x10a0, 0x1e00 }) |cp| {
        try std.testing.expectEqual(cp, toLower(cp));
    }
}
