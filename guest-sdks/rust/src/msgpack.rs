//! A bounds-checked MessagePack reader for wasm32 (SPEC 2).
//!
//! [`Reader`] is a cursor over bytes it borrows; copying it copies the cursor.
//! Every read checks bounds before it looks at a byte and leaves the cursor
//! where it was on error. Declared lengths larger than the bytes left are
//! refused at once (also array and map counts: every item takes at least one
//! byte), so a header claiming four billion items costs nothing. Nesting is
//! tracked with a fixed stack, never recursion, and stops at [`MAX_DEPTH`].

use core::fmt;

/// Containers may nest this deep (the host's `max_msgpack_depth`): 64 nested
/// arrays around a scalar are accepted, the 65th container is refused.
pub const MAX_DEPTH: usize = crate::abi::limits::MAX_MSGPACK_DEPTH as usize;

/// Why MessagePack could not be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// A value runs past the end of its buffer (or the buffer is empty).
    Truncated,
    /// The next value is not of the type asked for.
    Type,
    /// A number does not fit the type asked for.
    Range,
    /// Containers nest deeper than [`MAX_DEPTH`].
    Depth,
    /// An extension type or the reserved byte 0xc1.
    Malformed,
    /// A map key that is not a string.
    NonStringKey,
    /// Bytes after the one value a document holds.
    Trailing,
    /// A string that is not UTF-8.
    Utf8,
    /// The writer could not get memory.
    OutOfMemory,
    /// A string, bin or container longer than MessagePack can describe.
    TooLong,
}

impl Error {
    /// The ABI error code a hook answers for this error: `limit` when memory
    /// or sizes ran out, `invalid` for everything about malformed input.
    pub fn code(self) -> &'static str {
        match self {
            Error::OutOfMemory | Error::TooLong => crate::abi::code::LIMIT,
            _ => crate::abi::code::INVALID,
        }
    }

    /// A short English description.
    pub fn as_str(self) -> &'static str {
        match self {
            Error::Truncated => "MessagePack value is truncated",
            Error::Type => "unexpected MessagePack type",
            Error::Range => "number out of range",
            Error::Depth => "MessagePack nests deeper than 64 containers",
            Error::Malformed => "malformed MessagePack (extension type or 0xc1)",
            Error::NonStringKey => "MessagePack map key is not a string",
            Error::Trailing => "bytes after the MessagePack value",
            Error::Utf8 => "MessagePack string is not UTF-8",
            Error::OutOfMemory => "the plugin ran out of memory",
            Error::TooLong => "value too long for MessagePack",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for Error {}

/// One MessagePack token: scalars, str and bin whole; arrays and maps as
/// their header (the items follow).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Token<'a> {
    Nil,
    Bool(bool),
    /// Every integer that fits an `i64`, whatever its encoding.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// float32 (widened) or float64.
    Float(f64),
    Str(&'a str),
    Bin(&'a [u8]),
    /// An array header: this many items follow.
    Array(u32),
    /// A map header: this many key/value pairs follow.
    Map(u32),
}

/// The kind of a token, for [`Reader::peek_kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nil,
    Bool,
    Int,
    Float,
    Str,
    Bin,
    Array,
    Map,
}

/// A token before the UTF-8 check of its string.
#[derive(Clone, Copy)]
enum Head<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'a [u8]),
    Bin(&'a [u8]),
    Array(u32),
    Map(u32),
}

/// The big-endian number of `N` bytes at `pos`, or `Truncated`.
#[inline(always)]
fn be<const N: usize>(buf: &[u8], pos: usize) -> Result<u64, Error> {
    match buf.get(pos..pos + N) {
        Some(b) => {
            let mut v = 0u64;
            for &x in b {
                v = (v << 8) | x as u64;
            }
            Ok(v)
        }
        None => Err(Error::Truncated),
    }
}

/// `n` bytes at `pos`, or `Truncated`.
#[inline]
fn take(buf: &[u8], pos: usize, n: usize) -> Result<&[u8], Error> {
    match pos.checked_add(n) {
        Some(end) if end <= buf.len() => Ok(&buf[pos..end]),
        _ => Err(Error::Truncated),
    }
}

#[inline(always)]
fn uint(v: u64) -> Head<'static> {
    if v > i64::MAX as u64 {
        Head::UInt(v)
    } else {
        Head::Int(v as i64)
    }
}

/// Decode the token at `pos`; returns it and the position after it.
#[inline(always)]
fn head(buf: &[u8], pos: usize) -> Result<(Head<'_>, usize), Error> {
    let b = *buf.get(pos).ok_or(Error::Truncated)?;
    let p = pos + 1;
    Ok(match b {
        0x00..=0x7f => (Head::Int(b as i64), p),
        0x80..=0x8f => return container(buf, p, (b & 0x0f) as usize, true),
        0x90..=0x9f => return container(buf, p, (b & 0x0f) as usize, false),
        0xa0..=0xbf => return bytes(buf, p, (b & 0x1f) as usize, true),
        0xc0 => (Head::Nil, p),
        0xc1 | 0xc7..=0xc9 | 0xd4..=0xd8 => return Err(Error::Malformed),
        0xc2 => (Head::Bool(false), p),
        0xc3 => (Head::Bool(true), p),
        0xc4 => return bytes(buf, p + 1, be::<1>(buf, p)? as usize, false),
        0xc5 => return bytes(buf, p + 2, be::<2>(buf, p)? as usize, false),
        0xc6 => return bytes(buf, p + 4, be::<4>(buf, p)? as usize, false),
        0xca => (
            Head::Float(f32::from_bits(be::<4>(buf, p)? as u32) as f64),
            p + 4,
        ),
        0xcb => (Head::Float(f64::from_bits(be::<8>(buf, p)?)), p + 8),
        0xcc => (uint(be::<1>(buf, p)?), p + 1),
        0xcd => (uint(be::<2>(buf, p)?), p + 2),
        0xce => (uint(be::<4>(buf, p)?), p + 4),
        0xcf => (uint(be::<8>(buf, p)?), p + 8),
        0xd0 => (Head::Int(be::<1>(buf, p)? as u8 as i8 as i64), p + 1),
        0xd1 => (Head::Int(be::<2>(buf, p)? as u16 as i16 as i64), p + 2),
        0xd2 => (Head::Int(be::<4>(buf, p)? as u32 as i32 as i64), p + 4),
        0xd3 => (Head::Int(be::<8>(buf, p)? as i64), p + 8),
        0xd9 => return bytes(buf, p + 1, be::<1>(buf, p)? as usize, true),
        0xda => return bytes(buf, p + 2, be::<2>(buf, p)? as usize, true),
        0xdb => return bytes(buf, p + 4, be::<4>(buf, p)? as usize, true),
        0xdc => return container(buf, p + 2, be::<2>(buf, p)? as usize, false),
        0xdd => return container(buf, p + 4, be::<4>(buf, p)? as usize, false),
        0xde => return container(buf, p + 2, be::<2>(buf, p)? as usize, true),
        0xdf => return container(buf, p + 4, be::<4>(buf, p)? as usize, true),
        0xe0..=0xff => (Head::Int(b as i8 as i64), p),
    })
}

#[inline(always)]
fn bytes(buf: &[u8], pos: usize, n: usize, is_str: bool) -> Result<(Head<'_>, usize), Error> {
    let s = take(buf, pos, n)?;
    Ok((if is_str { Head::Str(s) } else { Head::Bin(s) }, pos + n))
}

/// A container header whose items cannot all fit the bytes left is refused
/// before anything is read (every item takes at least one byte).
#[inline(always)]
fn container(buf: &[u8], pos: usize, n: usize, is_map: bool) -> Result<(Head<'_>, usize), Error> {
    // n < 2^32, so 2 * n cannot overflow a u64.
    let items = if is_map { 2 * n as u64 } else { n as u64 };
    if items > (buf.len() - pos) as u64 {
        return Err(Error::Truncated);
    }
    // n < 2^32 by construction (at most four length bytes).
    let h = if is_map {
        Head::Map(n as u32)
    } else {
        Head::Array(n as u32)
    };
    Ok((h, pos))
}

#[inline]
fn utf8(s: &[u8]) -> Result<&str, Error> {
    if utf8_valid(s) {
        // SAFETY: utf8_valid accepts exactly the well-formed UTF-8 byte
        // sequences of Unicode table 3-7 (the native tests compare it with
        // core::str::from_utf8 on every sequence of up to 3 bytes and on
        // millions of others).
        Ok(unsafe { core::str::from_utf8_unchecked(s) })
    } else {
        Err(Error::Utf8)
    }
}

/// UTF-8 check tuned for fuel: ASCII a word at a time, and each multi-byte
/// sequence in one step (about half the instructions of `from_utf8` on
/// non-ASCII text, which dominates the cost of reading strings).
pub fn utf8_valid(s: &[u8]) -> bool {
    let n = s.len();
    let mut i = 0;
    while i < n {
        let b = s[i];
        if b < 0x80 {
            i += 1;
            while i + 16 <= n {
                let mut a = [0u8; 8];
                let mut b = [0u8; 8];
                a.copy_from_slice(&s[i..i + 8]);
                b.copy_from_slice(&s[i + 8..i + 16]);
                if (u64::from_le_bytes(a) | u64::from_le_bytes(b)) & 0x8080_8080_8080_8080 != 0 {
                    break;
                }
                i += 16;
            }
            continue;
        }
        if b < 0xe0 {
            // C2..DF, then one continuation byte.
            if b < 0xc2 || i + 1 >= n || s[i + 1] & 0xc0 != 0x80 {
                return false;
            }
            i += 2;
            // Text in Greek or Cyrillic script runs in 2-byte pairs: check
            // four at a time (leads C2..DF, continuations 80..BF), then one.
            while i + 8 <= n {
                let mut word = [0u8; 8];
                word.copy_from_slice(&s[i..i + 8]);
                let w = u64::from_le_bytes(word);
                // Leads 110xxxxx and continuations 10xxxxxx ...
                let shape = w & 0xc0e0_c0e0_c0e0_c0e0 == 0x80c0_80c0_80c0_80c0;
                // ... and no lead C0 or C1 (overlong): bits 1..4 of each lead set.
                let leads = (w & 0x001e_001e_001e_001e) + 0x7fff_7fff_7fff_7fff;
                if !shape || leads & 0x8000_8000_8000_8000 != 0x8000_8000_8000_8000 {
                    break;
                }
                i += 8;
            }
            while i + 1 < n && s[i].wrapping_sub(0xc2) < 0x1e && s[i + 1] & 0xc0 == 0x80 {
                i += 2;
            }
        } else if b < 0xf0 {
            if i + 2 >= n {
                return false;
            }
            // E0: A0..BF (no overlongs); ED: 80..9F (no surrogates).
            let (lo, hi) = match b {
                0xe0 => (0xa0, 0xbf),
                0xed => (0x80, 0x9f),
                _ => (0x80, 0xbf),
            };
            let c1 = s[i + 1];
            if c1 < lo || c1 > hi || s[i + 2] & 0xc0 != 0x80 {
                return false;
            }
            i += 3;
        } else {
            if b > 0xf4 || i + 3 >= n {
                return false;
            }
            // F0: 90..BF (no overlongs); F4: 80..8F (nothing above U+10FFFF).
            let (lo, hi) = match b {
                0xf0 => (0x90, 0xbf),
                0xf4 => (0x80, 0x8f),
                _ => (0x80, 0xbf),
            };
            let c1 = s[i + 1];
            if c1 < lo || c1 > hi || s[i + 2] & 0xc0 != 0x80 || s[i + 3] & 0xc0 != 0x80 {
                return false;
            }
            i += 4;
        }
    }
    true
}

/// The open containers while a value is walked or copied: items still to
/// read per level and which levels are maps. A fixed stack, no recursion.
pub(crate) struct Nest {
    left: [usize; MAX_DEPTH],
    maps: u64,
    depth: usize,
    max: usize,
}

impl Nest {
    /// `max` containers may nest (at most MAX_DEPTH).
    #[inline]
    pub(crate) fn new(max: usize) -> Self {
        Nest {
            left: [0; MAX_DEPTH],
            maps: 0,
            depth: 0,
            max: max.min(MAX_DEPTH),
        }
    }

    /// The next item is a map key.
    #[inline]
    pub(crate) fn expect_key(&self) -> bool {
        let d = self.depth;
        d > 0 && (self.maps >> (d - 1)) & 1 == 1 && self.left[d - 1] % 2 == 0
    }

    /// Account for one token just read: `container` is `(items, is_map)`
    /// for an array or map header. Returns true when the value is complete.
    #[inline(always)]
    pub(crate) fn step(&mut self, container: Option<(usize, bool)>) -> Result<bool, Error> {
        let d = self.depth;
        if d > 0 {
            self.left[d - 1] -= 1;
        }
        if let Some((items, is_map)) = container {
            if d >= self.max {
                return Err(Error::Depth);
            }
            if items > 0 {
                self.left[d] = items;
                if is_map {
                    self.maps |= 1u64 << d;
                } else {
                    self.maps &= !(1u64 << d);
                }
                self.depth = d + 1;
                return Ok(false);
            }
        }
        while self.depth > 0 && self.left[self.depth - 1] == 0 {
            self.depth -= 1;
        }
        Ok(self.depth == 0)
    }
}

/// Walk one complete value at `pos` and return the position after it.
/// `depth_left` containers may nest (MAX_DEPTH at a document's root);
/// every map key must be a string; with `check_utf8` every string is
/// checked too.
pub(crate) fn walk(
    buf: &[u8],
    pos: usize,
    depth_left: usize,
    check_utf8: bool,
) -> Result<usize, Error> {
    let mut nest = Nest::new(depth_left);
    let mut pos = pos;
    loop {
        let b = *buf.get(pos).ok_or(Error::Truncated)?;
        let key = nest.expect_key();
        let container = if !(0x80..0xe0).contains(&b) || b == 0xc0 || b == 0xc2 || b == 0xc3 {
            // One-byte scalars: fixint, nil, bool.
            if key {
                return Err(Error::NonStringKey);
            }
            pos += 1;
            None
        } else {
            let (h, next) = head(buf, pos)?;
            pos = next;
            match h {
                Head::Str(s) => {
                    if check_utf8 {
                        utf8(s)?;
                    }
                    None
                }
                _ if key => return Err(Error::NonStringKey),
                Head::Array(n) => Some((n as usize, false)),
                Head::Map(n) => Some((2 * n as usize, true)),
                _ => None,
            }
        };
        if nest.step(container)? {
            return Ok(pos);
        }
    }
}

/// The whole buffer is exactly one well-formed value: in bounds, at most
/// [`MAX_DEPTH`] nested containers, no extension types, string map keys, no
/// trailing bytes. Strings are not checked for UTF-8 (see [`validate_utf8`]).
pub fn validate(buf: &[u8]) -> Result<(), Error> {
    let end = walk(buf, 0, MAX_DEPTH, false)?;
    if end != buf.len() {
        return Err(Error::Trailing);
    }
    Ok(())
}

/// [`validate`], and every string is UTF-8.
pub fn validate_utf8(buf: &[u8]) -> Result<(), Error> {
    let end = walk(buf, 0, MAX_DEPTH, true)?;
    if end != buf.len() {
        return Err(Error::Trailing);
    }
    Ok(())
}

/// A cursor over MessagePack bytes it does not own.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub const fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// The next byte, or `Truncated`.
    #[inline]
    pub(crate) fn peek_byte(&self) -> Result<u8, Error> {
        self.buf.get(self.pos).copied().ok_or(Error::Truncated)
    }

    /// Move past `n` bytes already checked to be there.
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) {
        self.pos += n;
    }

    /// How far the cursor is into the buffer.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// True when every byte has been read.
    pub fn is_at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// `Trailing` unless every byte has been read.
    pub fn finish(&self) -> Result<(), Error> {
        if self.is_at_end() {
            Ok(())
        } else {
            Err(Error::Trailing)
        }
    }

    fn token(&self) -> Result<(Token<'a>, usize), Error> {
        let (h, next) = head(self.buf, self.pos)?;
        let t = match h {
            Head::Nil => Token::Nil,
            Head::Bool(b) => Token::Bool(b),
            Head::Int(i) => Token::Int(i),
            Head::UInt(u) => Token::UInt(u),
            Head::Float(f) => Token::Float(f),
            Head::Str(s) => Token::Str(utf8(s)?),
            Head::Bin(b) => Token::Bin(b),
            Head::Array(n) => Token::Array(n),
            Head::Map(n) => Token::Map(n),
        };
        Ok((t, next))
    }

    /// The next token, without moving.
    pub fn peek(&self) -> Result<Token<'a>, Error> {
        self.token().map(|(t, _)| t)
    }

    /// The kind of the next token, without moving (and without checking
    /// a string's UTF-8).
    pub fn peek_kind(&self) -> Result<Kind, Error> {
        Ok(match head(self.buf, self.pos)?.0 {
            Head::Nil => Kind::Nil,
            Head::Bool(_) => Kind::Bool,
            Head::Int(_) | Head::UInt(_) => Kind::Int,
            Head::Float(_) => Kind::Float,
            Head::Str(_) => Kind::Str,
            Head::Bin(_) => Kind::Bin,
            Head::Array(_) => Kind::Array,
            Head::Map(_) => Kind::Map,
        })
    }

    /// Read one token. A container's items follow it.
    #[allow(clippy::should_implement_trait)]
    pub fn read(&mut self) -> Result<Token<'a>, Error> {
        let (t, next) = self.token()?;
        self.pos = next;
        Ok(t)
    }

    /// Read a token of one kind, or fail with `Type` without moving.
    fn typed<T>(&mut self, f: impl FnOnce(Token<'a>) -> Result<T, Error>) -> Result<T, Error> {
        let (t, next) = self.token()?;
        let v = f(t)?;
        self.pos = next;
        Ok(v)
    }

    pub fn read_nil(&mut self) -> Result<(), Error> {
        self.typed(|t| match t {
            Token::Nil => Ok(()),
            _ => Err(Error::Type),
        })
    }

    pub fn read_bool(&mut self) -> Result<bool, Error> {
        self.typed(|t| match t {
            Token::Bool(b) => Ok(b),
            _ => Err(Error::Type),
        })
    }

    /// Any integer encoding; `Range` above `i64::MAX`.
    pub fn read_int(&mut self) -> Result<i64, Error> {
        self.typed(|t| match t {
            Token::Int(i) => Ok(i),
            Token::UInt(_) => Err(Error::Range),
            _ => Err(Error::Type),
        })
    }

    /// Any non-negative integer; `Range` when negative.
    pub fn read_uint(&mut self) -> Result<u64, Error> {
        self.typed(|t| match t {
            Token::Int(i) if i >= 0 => Ok(i as u64),
            Token::Int(_) => Err(Error::Range),
            Token::UInt(u) => Ok(u),
            _ => Err(Error::Type),
        })
    }

    /// An integer converted to `T` (`i32`, `u8`, ...); `Range` if it does not fit.
    pub fn read_int_as<T: TryFrom<i64>>(&mut self) -> Result<T, Error> {
        self.typed(|t| match t {
            Token::Int(i) => T::try_from(i).map_err(|_| Error::Range),
            Token::UInt(_) => Err(Error::Range),
            _ => Err(Error::Type),
        })
    }

    /// A float of either width, or an integer converted to `f64`.
    pub fn read_f64(&mut self) -> Result<f64, Error> {
        self.typed(|t| match t {
            Token::Float(f) => Ok(f),
            Token::Int(i) => Ok(i as f64),
            Token::UInt(u) => Ok(u as f64),
            _ => Err(Error::Type),
        })
    }

    /// A string (checked for UTF-8), borrowed from the buffer.
    pub fn read_str(&mut self) -> Result<&'a str, Error> {
        self.typed(|t| match t {
            Token::Str(s) => Ok(s),
            _ => Err(Error::Type),
        })
    }

    /// A bin, borrowed from the buffer.
    pub fn read_bin(&mut self) -> Result<&'a [u8], Error> {
        self.typed(|t| match t {
            Token::Bin(b) => Ok(b),
            _ => Err(Error::Type),
        })
    }

    /// An array header: the item count.
    pub fn read_array(&mut self) -> Result<u32, Error> {
        self.typed(|t| match t {
            Token::Array(n) => Ok(n),
            _ => Err(Error::Type),
        })
    }

    /// A map header: the pair count.
    pub fn read_map(&mut self) -> Result<u32, Error> {
        self.typed(|t| match t {
            Token::Map(n) => Ok(n),
            _ => Err(Error::Type),
        })
    }

    /// Skip one complete value.
    pub fn skip(&mut self) -> Result<(), Error> {
        self.pos = walk(self.buf, self.pos, MAX_DEPTH, false)?;
        Ok(())
    }

    /// Skip one complete value with at most `depth` nested containers.
    pub(crate) fn skip_depth(&mut self, depth: usize) -> Result<(), Error> {
        self.pos = walk(self.buf, self.pos, depth, false)?;
        Ok(())
    }

    /// Skip one complete value and return its encoded bytes. The value's
    /// structure is checked (depth, string keys), its strings' UTF-8 is not.
    pub fn read_raw(&mut self) -> Result<&'a [u8], Error> {
        let start = self.pos;
        self.pos = walk(self.buf, self.pos, MAX_DEPTH, false)?;
        Ok(&self.buf[start..self.pos])
    }

    /// With the cursor on a map: a reader on the value of `key`
    /// (`Ok(None)` if absent). The cursor itself does not move.
    pub fn find(&self, key: &str) -> Result<Option<Reader<'a>>, Error> {
        let mut r = *self;
        let n = r.read_map()?;
        for _ in 0..n {
            let (h, next) = head(r.buf, r.pos)?;
            let k = match h {
                Head::Str(k) => k,
                _ => return Err(Error::NonStringKey),
            };
            r.pos = next;
            if k == key.as_bytes() {
                return Ok(Some(r));
            }
            r.skip()?;
        }
        Ok(None)
    }

    /// Read one complete value into an owned [`crate::Value`].
    pub fn read_value(&mut self) -> Result<crate::Value, Error> {
        let mut r = *self;
        let v = crate::value::read_value(&mut r, MAX_DEPTH)?;
        *self = r;
        Ok(v)
    }
}
