//! An owned, decoded MessagePack value, for code that prefers a tree to a
//! token stream.

use crate::msgpack::{Error, Reader, Token};
use crate::writer::{Encode, Writer};

/// One decoded MessagePack value. Maps keep their order; keys are strings
/// (the ABI allows no others).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    /// Every integer that fits an `i64`.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl Value {
    /// Decode one complete document: exactly one value, no trailing bytes.
    pub fn decode(buf: &[u8]) -> Result<Value, Error> {
        let mut r = Reader::new(buf);
        let v = r.read_value()?;
        r.finish()?;
        Ok(v)
    }

    /// Encode into a fresh buffer (smallest encodings).
    pub fn encode_to_vec(&self) -> Result<Vec<u8>, Error> {
        crate::writer::to_vec(self)
    }

    /// The value of `key` when this is a map that has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::UInt(u) => Some(*u as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bin(&self) -> Option<&[u8]> {
        match self {
            Value::Bin(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(String, Value)]> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
}

/// Read one value with at most `depth` nested containers. Recursion is
/// bounded by that depth (64 frames at most).
pub(crate) fn read_value(r: &mut Reader<'_>, depth: usize) -> Result<Value, Error> {
    Ok(match r.read()? {
        Token::Nil => Value::Nil,
        Token::Bool(b) => Value::Bool(b),
        Token::Int(i) => Value::Int(i),
        Token::UInt(u) => Value::UInt(u),
        Token::Float(f) => Value::Float(f),
        Token::Str(s) => Value::Str(s.to_owned()),
        Token::Bin(b) => Value::Bin(b.to_vec()),
        Token::Array(n) => {
            if depth == 0 {
                return Err(Error::Depth);
            }
            // n is bounded by the bytes left (checked by the reader).
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                items.push(read_value(r, depth - 1)?);
            }
            Value::Array(items)
        }
        Token::Map(n) => {
            if depth == 0 {
                return Err(Error::Depth);
            }
            let mut pairs = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let k = match r.read()? {
                    Token::Str(k) => k.to_owned(),
                    _ => return Err(Error::NonStringKey),
                };
                pairs.push((k, read_value(r, depth - 1)?));
            }
            Value::Map(pairs)
        }
    })
}

impl Encode for Value {
    fn encode(&self, w: &mut Writer) {
        match self {
            Value::Nil => w.write_nil(),
            Value::Bool(b) => w.write_bool(*b),
            Value::Int(i) => w.write_int(*i),
            Value::UInt(u) => w.write_uint(*u),
            Value::Float(f) => w.write_f64(*f),
            Value::Str(s) => w.write_str(s),
            Value::Bin(b) => w.write_bin(b),
            Value::Array(items) => {
                w.write_array(items.len());
                for v in items {
                    v.encode(w);
                }
                w
            }
            Value::Map(pairs) => {
                w.write_map(pairs.len());
                for (k, v) in pairs {
                    w.write_str(k);
                    v.encode(w);
                }
                w
            }
        };
    }
}

macro_rules! from_impls {
    ($($t:ty => |$v:ident| $e:expr;)*) => {$(
        impl From<$t> for Value {
            fn from($v: $t) -> Value { $e }
        }
    )*};
}
from_impls! {
    () => |_v| Value::Nil;
    bool => |v| Value::Bool(v);
    i32 => |v| Value::Int(v as i64);
    i64 => |v| Value::Int(v);
    u32 => |v| Value::Int(v as i64);
    u64 => |v| if v > i64::MAX as u64 { Value::UInt(v) } else { Value::Int(v as i64) };
    f64 => |v| Value::Float(v);
    &str => |v| Value::Str(v.to_owned());
    String => |v| Value::Str(v);
    Vec<Value> => |v| Value::Array(v);
}
