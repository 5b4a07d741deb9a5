// Package msgpack is the MessagePack reader and writer of the wasmext Go SDK
// (ABI v1, abi/SPEC.md section 2).
//
// It is sized for wasm32 guests: lengths are at most 2^32-1, every read is
// bounds-checked before it happens, a declared length larger than the bytes
// left is refused at once (so a 4-billion-item header costs nothing),
// nesting is limited to MaxDepth containers and tracked with a fixed stack,
// never recursion (Decode recurses, but only MaxDepth deep). The writer
// always picks the smallest encoding, so its bytes equal the canonical bytes
// of abi/vectors/msgpack.json.
//
// The package is plain Go: it builds and tests on any GOOS, not only wasip1.
package msgpack

import "errors"

// MaxDepth is the deepest nesting of containers the ABI accepts
// (max_msgpack_depth): 64 nested arrays around a scalar are fine, 65 are not.
const MaxDepth = 64

// MaxLen is the longest str, bin, array or map MessagePack can describe.
const MaxLen = 1<<32 - 1

// Errors. Every failed read leaves the reader where it was.
var (
	ErrTruncated = errors.New("msgpack: value runs past the end of the buffer")
	ErrType      = errors.New("msgpack: the next value is not of the type asked for")
	ErrRange     = errors.New("msgpack: number out of range for the type asked for")
	ErrDepth     = errors.New("msgpack: containers nested deeper than 64")
	ErrExt       = errors.New("msgpack: extension types are not part of the ABI")
	ErrReserved  = errors.New("msgpack: reserved byte 0xc1")
	ErrKey       = errors.New("msgpack: map key is not a string")
	ErrTrailing  = errors.New("msgpack: bytes after the value")
	ErrUTF8      = errors.New("msgpack: string is not valid UTF-8")
	ErrTooLong   = errors.New("msgpack: length does not fit MessagePack (2^32-1 at most)")
	ErrNotFound  = errors.New("msgpack: key not in the map")
)

// Kind is the type of one MessagePack value.
type Kind uint8

const (
	Invalid Kind = iota
	Nil
	Bool
	Int   // any integer that fits an int64 (Token.Int)
	Uint  // an unsigned integer above math.MaxInt64 (Token.Uint)
	Float // float32 or float64, widened to float64 (Token.Float)
	Str
	Bin
	Array // Token.Len items follow
	Map   // Token.Len key/value pairs follow
)

var kindNames = [...]string{"invalid", "nil", "bool", "int", "uint", "float", "str", "bin", "array", "map"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Token is one MessagePack token: a whole scalar, str or bin, or the header
// of an array or map (whose items follow it).
type Token struct {
	Kind  Kind
	Bool  bool
	Int   int64
	Uint  uint64
	Float float64
	// Bytes of a Str or Bin. When read, a view into the reader's buffer.
	Bytes []byte
	// Len of an Array (items) or Map (pairs).
	Len uint32
}
