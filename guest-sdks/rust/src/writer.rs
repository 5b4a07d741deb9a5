//! A growable MessagePack writer that always picks the smallest encoding,
//! so its bytes equal the canonical bytes of `abi/vectors/msgpack.json`.

use std::collections::{BTreeMap, HashMap};

use crate::msgpack::{Error, Nest, Reader, Token, MAX_DEPTH};

/// A growable MessagePack buffer.
///
/// Errors are sticky: when memory runs out (or a string is longer than
/// MessagePack can describe) every later write is a no-op and
/// [`Writer::error`] reports the first error, so code can write a whole
/// value and check once. Writes return `&mut Self` and chain:
/// `w.write_map(1).write_str("a").write_int(1);`.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
    /// Bytes before `base` belong to the SDK (the response envelope a
    /// handler's value is written into); `clear` keeps them.
    base: usize,
    err: Option<Error>,
}

impl Writer {
    /// An empty writer; allocates on the first write.
    pub const fn new() -> Self {
        Writer {
            buf: Vec::new(),
            base: 0,
            err: None,
        }
    }

    /// A writer whose value goes after `prefix` (the SDK's envelope).
    pub(crate) fn reuse(buf: Vec<u8>) -> Self {
        Writer {
            buf,
            base: 0,
            err: None,
        }
    }

    /// Make everything written so far part of the envelope.
    pub(crate) fn seal(&mut self) {
        self.base = self.buf.len();
    }

    /// The whole buffer including the envelope.
    pub(crate) fn all(&self) -> &[u8] {
        &self.buf
    }

    pub(crate) fn all_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    pub(crate) fn reset_all(&mut self) {
        self.buf.clear();
        self.base = 0;
        self.err = None;
    }

    pub(crate) fn take_buf(&mut self) -> Vec<u8> {
        self.base = 0;
        self.err = None;
        core::mem::take(&mut self.buf)
    }

    /// The bytes written (since the last `clear`).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.base..]
    }

    /// How many bytes were written.
    pub fn len(&self) -> usize {
        self.buf.len() - self.base
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget what was written and any error; the memory is kept.
    pub fn clear(&mut self) {
        self.buf.truncate(self.base);
        self.err = None;
    }

    /// The first error since the last `clear`, if any.
    pub fn error(&self) -> Option<Error> {
        self.err
    }

    /// `Ok` when every write so far succeeded.
    pub fn check(&self) -> Result<(), Error> {
        match self.err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The bytes, or the first error.
    pub fn into_bytes(mut self) -> Result<Vec<u8>, Error> {
        self.check()?;
        if self.base > 0 {
            self.buf.drain(..self.base);
        }
        Ok(self.buf)
    }

    fn fail(&mut self, e: Error) {
        if self.err.is_none() {
            self.err = Some(e);
        }
    }

    /// Append bytes as they are: an already-encoded value, or text when
    /// the writer serves as a plain byte buffer.
    pub fn write_raw(&mut self, bytes: &[u8]) -> &mut Self {
        if self.err.is_none() {
            if self.buf.capacity() - self.buf.len() < bytes.len() && !self.grow(bytes.len()) {
                self.fail(Error::OutOfMemory);
            } else {
                self.buf.extend_from_slice(bytes);
            }
        }
        self
    }

    /// Make room for `more` bytes. Rather than `realloc` (which copies the
    /// whole old capacity byte by byte), allocate anew and copy only the
    /// bytes in use: a reused buffer is often nearly empty.
    #[cold]
    fn grow(&mut self, more: usize) -> bool {
        let need = match self.buf.len().checked_add(more) {
            Some(n) => n,
            None => return false,
        };
        // Some slack, so that a short write after a huge one (the "stop"
        // flag after a value) does not copy everything again.
        let cap = need
            .saturating_add(64)
            .max(self.buf.capacity().saturating_mul(2));
        let mut fresh: Vec<u8> = Vec::new();
        if fresh.try_reserve_exact(cap).is_err() && fresh.try_reserve_exact(need).is_err() {
            return false;
        }
        fresh.extend_from_slice(&self.buf);
        self.buf = fresh;
        true
    }

    #[inline]
    fn head(&mut self, marker: u8, n: u64, size: usize) -> &mut Self {
        let b = n.to_be_bytes();
        let mut tmp = [0u8; 9];
        tmp[0] = marker;
        tmp[1..1 + size].copy_from_slice(&b[8 - size..]);
        self.write_raw(&tmp[..1 + size])
    }

    pub fn write_nil(&mut self) -> &mut Self {
        self.write_raw(&[0xc0])
    }

    pub fn write_bool(&mut self, v: bool) -> &mut Self {
        self.write_raw(&[if v { 0xc3 } else { 0xc2 }])
    }

    /// Any signed integer, smallest encoding (non-negative ones as uint).
    pub fn write_int(&mut self, v: i64) -> &mut Self {
        if v >= 0 {
            return self.write_uint(v as u64);
        }
        if v >= -32 {
            self.write_raw(&[v as u8])
        } else if v >= i8::MIN as i64 {
            self.head(0xd0, v as u64, 1)
        } else if v >= i16::MIN as i64 {
            self.head(0xd1, v as u64, 2)
        } else if v >= i32::MIN as i64 {
            self.head(0xd2, v as u64, 4)
        } else {
            self.head(0xd3, v as u64, 8)
        }
    }

    /// Any unsigned integer, smallest encoding.
    pub fn write_uint(&mut self, v: u64) -> &mut Self {
        if v < 0x80 {
            self.write_raw(&[v as u8])
        } else if v <= u8::MAX as u64 {
            self.head(0xcc, v, 1)
        } else if v <= u16::MAX as u64 {
            self.head(0xcd, v, 2)
        } else if v <= u32::MAX as u64 {
            self.head(0xce, v, 4)
        } else {
            self.head(0xcf, v, 8)
        }
    }

    /// Always float64.
    pub fn write_f64(&mut self, v: f64) -> &mut Self {
        self.head(0xcb, v.to_bits(), 8)
    }

    fn len_head(&mut self, len: usize, fix: Option<(u8, usize)>, markers: [u8; 3]) -> bool {
        let n = len as u64;
        match fix {
            Some((base, limit)) if len < limit => {
                self.write_raw(&[base | len as u8]);
            }
            _ if markers[0] != 0 && n <= u8::MAX as u64 => {
                self.head(markers[0], n, 1);
            }
            _ if n <= u16::MAX as u64 => {
                self.head(markers[1], n, 2);
            }
            _ if n <= u32::MAX as u64 => {
                self.head(markers[2], n, 4);
            }
            _ => {
                self.fail(Error::TooLong);
                return false;
            }
        }
        true
    }

    pub fn write_str(&mut self, s: &str) -> &mut Self {
        if self.len_head(s.len(), Some((0xa0, 32)), [0xd9, 0xda, 0xdb]) {
            self.write_raw(s.as_bytes());
        }
        self
    }

    pub fn write_bin(&mut self, b: &[u8]) -> &mut Self {
        if self.len_head(b.len(), None, [0xc4, 0xc5, 0xc6]) {
            self.write_raw(b);
        }
        self
    }

    /// An array header; write `len` values after it.
    pub fn write_array(&mut self, len: usize) -> &mut Self {
        self.len_head(len, Some((0x90, 16)), [0, 0xdc, 0xdd]);
        self
    }

    /// A map header; write `len` key/value pairs after it.
    pub fn write_map(&mut self, len: usize) -> &mut Self {
        self.len_head(len, Some((0x80, 16)), [0, 0xde, 0xdf]);
        self
    }

    /// One token as [`Reader::read`] returns it.
    pub fn write_token(&mut self, t: Token<'_>) -> &mut Self {
        match t {
            Token::Nil => self.write_nil(),
            Token::Bool(b) => self.write_bool(b),
            Token::Int(i) => self.write_int(i),
            Token::UInt(u) => self.write_uint(u),
            Token::Float(f) => self.write_f64(f),
            Token::Str(s) => self.write_str(s),
            Token::Bin(b) => self.write_bin(b),
            Token::Array(n) => self.write_array(n as usize),
            Token::Map(n) => self.write_map(n as usize),
        }
    }

    /// Any value that implements [`Encode`].
    pub fn write<T: Encode + ?Sized>(&mut self, v: &T) -> &mut Self {
        v.encode(self);
        self
    }

    /// Decode the value at `r` token by token (advancing `r`) and encode it
    /// again: a canonical copy, not a byte copy. Depth, bounds, string map
    /// keys and UTF-8 are checked on the way; on error nothing is written
    /// and `r` does not move.
    pub fn copy_value(&mut self, r: &mut Reader<'_>) -> Result<(), Error> {
        let start = self.buf.len();
        let mut cursor = *r;
        match self.copy_tokens(&mut cursor) {
            Ok(()) => {
                *r = cursor;
                self.check()
            }
            Err(e) => {
                self.buf.truncate(start.max(self.base));
                Err(e)
            }
        }
    }

    fn copy_tokens(&mut self, cursor: &mut Reader<'_>) -> Result<(), Error> {
        let mut nest = Nest::new(MAX_DEPTH);
        loop {
            let key = nest.expect_key();
            let container = match cursor.peek_byte()? {
                // One-byte tokens (fixint, nil, bool) are canonical as they are.
                b @ (0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3) => {
                    if key {
                        return Err(Error::NonStringKey);
                    }
                    self.push_byte(b);
                    cursor.advance(1);
                    None
                }
                _ => {
                    let t = cursor.read()?;
                    if key && !matches!(t, Token::Str(_)) {
                        return Err(Error::NonStringKey);
                    }
                    self.write_token(t);
                    match t {
                        Token::Array(n) => Some((n as usize, false)),
                        Token::Map(n) => Some((2 * n as usize, true)),
                        _ => None,
                    }
                }
            };
            if nest.step(container)? {
                return Ok(());
            }
        }
    }

    #[inline]
    fn push_byte(&mut self, b: u8) {
        if self.err.is_none() {
            if self.buf.len() == self.buf.capacity() && !self.grow(1) {
                self.fail(Error::OutOfMemory);
            } else {
                self.buf.push(b);
            }
        }
    }
}

/// A value the [`Writer`] can encode.
///
/// Implemented for `()` (nil), `bool`, every integer type, `f32`/`f64`,
/// `str`/`String`, `Option<T>` (None is nil), slices, arrays and `Vec`s
/// (arrays; use [`Bin`] for bytes), string-keyed `BTreeMap`/`HashMap`
/// (maps), tuples of up to eight (arrays), [`crate::Value`], [`Bin`] and
/// [`Raw`].
pub trait Encode {
    fn encode(&self, w: &mut Writer);
}

/// Bytes encoded as MessagePack bin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bin<'a>(pub &'a [u8]);

/// Bytes that already are one encoded MessagePack value, written as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raw<'a>(pub &'a [u8]);

impl Encode for () {
    fn encode(&self, w: &mut Writer) {
        w.write_nil();
    }
}

impl Encode for bool {
    fn encode(&self, w: &mut Writer) {
        w.write_bool(*self);
    }
}

macro_rules! encode_ints {
    ($method:ident as $wide:ty: $($t:ty),*) => {$(
        impl Encode for $t {
            fn encode(&self, w: &mut Writer) {
                w.$method(*self as $wide);
            }
        }
    )*};
}
encode_ints!(write_int as i64: i8, i16, i32, i64, isize);
encode_ints!(write_uint as u64: u8, u16, u32, u64, usize);

impl Encode for f64 {
    fn encode(&self, w: &mut Writer) {
        w.write_f64(*self);
    }
}

impl Encode for f32 {
    fn encode(&self, w: &mut Writer) {
        w.write_f64(*self as f64);
    }
}

impl Encode for str {
    fn encode(&self, w: &mut Writer) {
        w.write_str(self);
    }
}

impl Encode for String {
    fn encode(&self, w: &mut Writer) {
        w.write_str(self);
    }
}

impl Encode for Bin<'_> {
    fn encode(&self, w: &mut Writer) {
        w.write_bin(self.0);
    }
}

impl Encode for Raw<'_> {
    fn encode(&self, w: &mut Writer) {
        w.write_raw(self.0);
    }
}

impl<T: Encode + ?Sized> Encode for &T {
    fn encode(&self, w: &mut Writer) {
        (**self).encode(w);
    }
}

impl<T: Encode + ?Sized> Encode for Box<T> {
    fn encode(&self, w: &mut Writer) {
        (**self).encode(w);
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, w: &mut Writer) {
        match self {
            Some(v) => v.encode(w),
            None => {
                w.write_nil();
            }
        }
    }
}

impl<T: Encode> Encode for [T] {
    fn encode(&self, w: &mut Writer) {
        w.write_array(self.len());
        for v in self {
            v.encode(w);
        }
    }
}

impl<T: Encode, const N: usize> Encode for [T; N] {
    fn encode(&self, w: &mut Writer) {
        self[..].encode(w);
    }
}

impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, w: &mut Writer) {
        self[..].encode(w);
    }
}

impl<K: AsRef<str>, V: Encode> Encode for BTreeMap<K, V> {
    fn encode(&self, w: &mut Writer) {
        w.write_map(self.len());
        for (k, v) in self {
            w.write_str(k.as_ref());
            v.encode(w);
        }
    }
}

impl<K: AsRef<str>, V: Encode, S> Encode for HashMap<K, V, S> {
    fn encode(&self, w: &mut Writer) {
        w.write_map(self.len());
        for (k, v) in self {
            w.write_str(k.as_ref());
            v.encode(w);
        }
    }
}

macro_rules! encode_tuples {
    ($($n:literal: ($($name:ident),+);)*) => {$(
        impl<$($name: Encode),+> Encode for ($($name,)+) {
            #[allow(non_snake_case)]
            fn encode(&self, w: &mut Writer) {
                let ($($name,)+) = self;
                w.write_array($n);
                $($name.encode(w);)+
            }
        }
    )*};
}
encode_tuples! {
    1: (A);
    2: (A, B);
    3: (A, B, C);
    4: (A, B, C, D);
    5: (A, B, C, D, E);
    6: (A, B, C, D, E, F);
    7: (A, B, C, D, E, F, G);
    8: (A, B, C, D, E, F, G, H);
}

/// Encode one value into a fresh buffer.
pub fn to_vec<T: Encode + ?Sized>(v: &T) -> Result<Vec<u8>, Error> {
    let mut w = Writer::new();
    v.encode(&mut w);
    w.into_bytes()
}
