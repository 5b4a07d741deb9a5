package msgpack

import (
	"math"
	"unicode/utf8"
)

// Reader is a cursor over bytes it does not own. It is a small value: a copy
// is an independent cursor on the same bytes. Every read checks bounds first
// and leaves the cursor where it was on error.
//
// Reads return views into the buffer (Token.Bytes, ReadStringBytes, ReadBin,
// Raw): they stay valid as long as the buffer does.
type Reader struct {
	buf []byte
	pos int
	// buf is exactly one value that walk accepted (see Sub).
	checked bool
}

// NewReader returns a reader at the start of b.
func NewReader(b []byte) Reader { return Reader{buf: b} }

// Pos is the offset of the next byte to read.
func (r *Reader) Pos() int { return r.pos }

// Remaining is the number of bytes not read yet.
func (r *Reader) Remaining() int { return len(r.buf) - r.pos }

// AtEnd reports whether every byte has been read.
func (r *Reader) AtEnd() bool { return r.pos >= len(r.buf) }

// Finish returns ErrTrailing unless every byte has been read.
func (r *Reader) Finish() error {
	if !r.AtEnd() {
		return ErrTrailing
	}
	return nil
}

func be16(b []byte) uint32 { return uint32(b[0])<<8 | uint32(b[1]) }
func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
func be64(b []byte) uint64 { return uint64(be32(b))<<32 | uint64(be32(b[4:])) }

// token decodes the token at b[pos:]: a scalar, str or bin whole, a container
// as its header. A container count that the bytes left cannot hold (every
// item takes at least one byte) is ErrTruncated.
func token(b []byte, pos int) (t Token, next int, err error) {
	if pos >= len(b) {
		return t, pos, ErrTruncated
	}
	c := b[pos]
	rest := b[pos+1:]
	switch {
	case c <= 0x7f:
		return Token{Kind: Int, Int: int64(c)}, pos + 1, nil
	case c >= 0xe0:
		return Token{Kind: Int, Int: int64(int8(c))}, pos + 1, nil
	case c <= 0x8f:
		return container(Map, uint64(c&0x0f), b, pos+1)
	case c <= 0x9f:
		return container(Array, uint64(c&0x0f), b, pos+1)
	case c <= 0xbf:
		return bytesOf(Str, uint64(c&0x1f), b, pos+1)
	}
	// Fixed-size heads: how many bytes follow the type byte.
	var size int
	switch c {
	case 0xc0:
		return Token{Kind: Nil}, pos + 1, nil
	case 0xc1:
		return t, pos, ErrReserved
	case 0xc2, 0xc3:
		return Token{Kind: Bool, Bool: c == 0xc3}, pos + 1, nil
	case 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return t, pos, ErrExt
	case 0xc4, 0xcc, 0xd0, 0xd9:
		size = 1
	case 0xc5, 0xcd, 0xd1, 0xda, 0xdc, 0xde:
		size = 2
	case 0xc6, 0xca, 0xce, 0xd2, 0xdb, 0xdd, 0xdf:
		size = 4
	default: // 0xcb, 0xcf, 0xd3
		size = 8
	}
	if len(rest) < size {
		return t, pos, ErrTruncated
	}
	next = pos + 1 + size
	var n uint64
	switch size {
	case 1:
		n = uint64(rest[0])
	case 2:
		n = uint64(be16(rest))
	case 4:
		n = uint64(be32(rest))
	default:
		n = be64(rest)
	}
	switch c {
	case 0xc4, 0xc5, 0xc6:
		return bytesOf(Bin, n, b, next)
	case 0xd9, 0xda, 0xdb:
		return bytesOf(Str, n, b, next)
	case 0xdc, 0xdd:
		return container(Array, n, b, next)
	case 0xde, 0xdf:
		return container(Map, n, b, next)
	case 0xca:
		return Token{Kind: Float, Float: float64(math.Float32frombits(uint32(n)))}, next, nil
	case 0xcb:
		return Token{Kind: Float, Float: math.Float64frombits(n)}, next, nil
	case 0xcc, 0xcd, 0xce, 0xcf:
		if n > math.MaxInt64 {
			return Token{Kind: Uint, Uint: n}, next, nil
		}
		return Token{Kind: Int, Int: int64(n)}, next, nil
	case 0xd0:
		return Token{Kind: Int, Int: int64(int8(n))}, next, nil
	case 0xd1:
		return Token{Kind: Int, Int: int64(int16(n))}, next, nil
	case 0xd2:
		return Token{Kind: Int, Int: int64(int32(n))}, next, nil
	default: // 0xd3
		return Token{Kind: Int, Int: int64(n)}, next, nil
	}
}

func bytesOf(k Kind, n uint64, b []byte, at int) (Token, int, error) {
	if n > uint64(len(b)-at) {
		return Token{}, 0, ErrTruncated
	}
	end := at + int(n)
	return Token{Kind: k, Bytes: b[at:end:end], Len: uint32(n)}, end, nil
}

func container(k Kind, n uint64, b []byte, at int) (Token, int, error) {
	min := n // each item takes at least one byte
	if k == Map {
		min = 2 * n
	}
	if min > uint64(len(b)-at) {
		return Token{}, 0, ErrTruncated
	}
	return Token{Kind: k, Len: uint32(n)}, at, nil
}

// Peek returns the next token without moving.
func (r *Reader) Peek() (Token, error) {
	t, _, err := token(r.buf, r.pos)
	return t, err
}

// PeekKind returns the kind of the next value without moving.
func (r *Reader) PeekKind() (Kind, error) {
	t, _, err := token(r.buf, r.pos)
	if err != nil {
		return Invalid, err
	}
	return t.Kind, nil
}

// Next reads one token: scalars, str and bin whole; arrays and maps as their
// header, whose Len items (pairs) follow.
func (r *Reader) Next() (Token, error) {
	t, next, err := token(r.buf, r.pos)
	if err == nil {
		r.pos = next
	}
	return t, err
}

// expect reads a token of kind k, or fails with ErrType without moving.
func (r *Reader) expect(k Kind) (Token, error) {
	t, next, err := token(r.buf, r.pos)
	if err != nil {
		return t, err
	}
	if t.Kind != k {
		return t, ErrType
	}
	r.pos = next
	return t, nil
}

// ReadNil reads a nil.
func (r *Reader) ReadNil() error {
	_, err := r.expect(Nil)
	return err
}

// ReadBool reads a bool.
func (r *Reader) ReadBool() (bool, error) {
	t, err := r.expect(Bool)
	return t.Bool, err
}

// ReadInt reads an integer of any width; ErrRange above math.MaxInt64.
func (r *Reader) ReadInt() (int64, error) {
	t, next, err := token(r.buf, r.pos)
	switch {
	case err != nil:
		return 0, err
	case t.Kind == Uint:
		return 0, ErrRange
	case t.Kind != Int:
		return 0, ErrType
	}
	r.pos = next
	return t.Int, nil
}

// ReadUint reads a non-negative integer of any width; ErrRange if negative.
func (r *Reader) ReadUint() (uint64, error) {
	t, next, err := token(r.buf, r.pos)
	switch {
	case err != nil:
		return 0, err
	case t.Kind == Uint:
		r.pos = next
		return t.Uint, nil
	case t.Kind != Int:
		return 0, ErrType
	case t.Int < 0:
		return 0, ErrRange
	}
	r.pos = next
	return uint64(t.Int), nil
}

// ReadFloat reads a float32 or float64, or an integer converted to float64.
func (r *Reader) ReadFloat() (float64, error) {
	t, next, err := token(r.buf, r.pos)
	if err != nil {
		return 0, err
	}
	var f float64
	switch t.Kind {
	case Float:
		f = t.Float
	case Int:
		f = float64(t.Int)
	case Uint:
		f = float64(t.Uint)
	default:
		return 0, ErrType
	}
	r.pos = next
	return f, nil
}

// ReadString reads a str into a new Go string (a copy).
func (r *Reader) ReadString() (string, error) {
	t, err := r.expect(Str)
	return string(t.Bytes), err
}

// ReadStringBytes reads a str as a view into the buffer (no copy).
func (r *Reader) ReadStringBytes() ([]byte, error) {
	t, err := r.expect(Str)
	return t.Bytes, err
}

// ReadBin reads a bin as a view into the buffer (no copy).
func (r *Reader) ReadBin() ([]byte, error) {
	t, err := r.expect(Bin)
	return t.Bytes, err
}

// ReadArrayLen reads an array header; the items follow.
func (r *Reader) ReadArrayLen() (int, error) {
	t, err := r.expect(Array)
	return int(t.Len), err
}

// ReadMapLen reads a map header; the key/value pairs follow.
func (r *Reader) ReadMapLen() (int, error) {
	t, err := r.expect(Map)
	return int(t.Len), err
}

// walk passes over one complete value starting at pos and returns where it
// ends. Nesting is tracked with a fixed stack of remaining item counts.
// keys: every map key must be a str; utf8: every str must be UTF-8;
// maxDepth (at most MaxDepth): how many containers may nest.
func walk(b []byte, pos int, keys, checkUTF8 bool, maxDepth int) (int, error) {
	// This loop decodes heads itself rather than through token: it runs
	// for every byte-sized item of every request, and on wasm each call
	// and each copy of a Token costs fuel.
	var left [MaxDepth]int // items still to read in each open container
	var maps uint64        // bit d: the container at depth d is a map
	depth := 0
	end := len(b)
	for {
		if pos >= end {
			return pos, ErrTruncated
		}
		c := b[pos]
		if keys && depth > 0 && maps&(1<<(depth-1)) != 0 && left[depth-1]&1 == 0 &&
			!(c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb) {
			return pos, ErrKey
		}
		items := -1 // a container's items (pairs count twice); -1: not a container
		isMap := false
		strLen := -1 // a str's or bin's length; -1: neither
		isStr := false
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			pos++
		case c <= 0x8f:
			items, isMap = 2*int(c&0x0f), true
			pos++
		case c <= 0x9f:
			items = int(c & 0x0f)
			pos++
		case c <= 0xbf:
			strLen, isStr = int(c&0x1f), true
			pos++
		case c == 0xc1:
			return pos, ErrReserved
		case c >= 0xc7 && c <= 0xc9 || c >= 0xd4 && c <= 0xd8:
			return pos, ErrExt
		default:
			size := 1 << (headSize[c-0xc4] & 3) // bytes of the length or number
			if end-pos-1 < size {
				return pos, ErrTruncated
			}
			var n int
			switch size {
			case 1:
				n = int(b[pos+1])
			case 2:
				n = int(be16(b[pos+1:]))
			case 4:
				n = int(be32(b[pos+1:]))
			}
			pos += 1 + size
			switch headSize[c-0xc4] >> 2 {
			case hStr:
				strLen, isStr = n, true
			case hBin:
				strLen = n
			case hArray:
				items = n
			case hMap:
				items, isMap = 2*n, true
			}
		}
		if strLen >= 0 {
			if strLen > end-pos {
				return pos, ErrTruncated
			}
			if isStr && checkUTF8 && !utf8.Valid(b[pos:pos+strLen]) {
				return pos, ErrUTF8
			}
			pos += strLen
		}
		if depth > 0 {
			left[depth-1]--
		}
		if items >= 0 {
			if depth >= maxDepth {
				return pos, ErrDepth // an empty container counts too
			}
			if items > end-pos { // every item takes at least one byte
				return pos, ErrTruncated
			}
			if items > 0 {
				left[depth] = items
				if isMap {
					maps |= 1 << depth
				} else {
					maps &^= 1 << depth
				}
				depth++
				continue
			}
		}
		for depth > 0 && left[depth-1] == 0 {
			depth--
		}
		if depth == 0 {
			return pos, nil
		}
	}
}

// What follows the type bytes 0xc4..0xdf: bits 0-1 log2 of the size of the
// length or number, bits 2-4 what the head starts (hScalar: a number).
const (
	hScalar = iota
	hStr
	hBin
	hArray
	hMap
)

var headSize = [0xe0 - 0xc4]uint8{
	0xc4 - 0xc4: 0 | hBin<<2, 1 | hBin<<2, 2 | hBin<<2, // bin 8/16/32
	0xca - 0xc4: 2, 3, // float 32/64
	0xcc - 0xc4: 0, 1, 2, 3, // uint 8..64
	0xd0 - 0xc4: 0, 1, 2, 3, // int 8..64
	0xd9 - 0xc4: 0 | hStr<<2, 1 | hStr<<2, 2 | hStr<<2, // str 8/16/32
	0xdc - 0xc4: 1 | hArray<<2, 2 | hArray<<2, // array 16/32
	0xde - 0xc4: 1 | hMap<<2, 2 | hMap<<2, // map 16/32
}

// Skip passes over one complete value, at any nesting up to MaxDepth.
func (r *Reader) Skip() error {
	if end, ok := r.checkedEnd(); ok {
		r.pos = end
		return nil
	}
	next, err := walk(r.buf, r.pos, false, false, MaxDepth)
	if err != nil {
		return err
	}
	r.pos = next
	return nil
}

// Sub passes over one complete value and returns a reader on exactly that
// value: reading it can never run into what follows.
func (r *Reader) Sub() (Reader, error) { return r.SubIn(0) }

// SubIn is Sub for a value that sits inside `enclosing` containers of its
// document (0..MaxDepth): the value may nest MaxDepth-enclosing deep, so the
// document stays within MaxDepth.
func (r *Reader) SubIn(enclosing int) (Reader, error) {
	end, ok := r.checkedEnd()
	if !ok || enclosing > 0 {
		var err error
		end, err = walk(r.buf, r.pos, false, false, MaxDepth-min(max(enclosing, 0), MaxDepth))
		if err != nil {
			return Reader{}, err
		}
	}
	sub := Reader{buf: r.buf[r.pos:end:end], checked: true}
	r.pos = end
	return sub, nil
}

// checkedEnd is where the value at the cursor ends, if the reader already
// knows that it is well-formed (a Sub reader still at its start).
func (r *Reader) checkedEnd() (int, bool) {
	if r.checked && r.pos == 0 {
		return len(r.buf), true
	}
	return 0, false
}

// Raw passes over one complete value and returns its encoded bytes (a view).
func (r *Reader) Raw() ([]byte, error) {
	start := r.pos
	if err := r.Skip(); err != nil {
		return nil, err
	}
	return r.buf[start:r.pos:r.pos], nil
}

// Lookup, with r positioned on a map, returns a reader on the value of key
// (r does not move). ErrNotFound if the map has no such key, ErrType if r is
// not on a map; a non-string key is skipped.
func (r Reader) Lookup(key string) (Reader, error) {
	n, err := r.ReadMapLen()
	if err != nil {
		return Reader{}, err
	}
	for i := 0; i < n; i++ {
		t, next, err := token(r.buf, r.pos)
		if err != nil {
			return Reader{}, err
		}
		if t.Kind == Str {
			r.pos = next
			if string(t.Bytes) == key {
				return Reader{buf: r.buf, pos: r.pos}, nil
			}
		} else if err := r.Skip(); err != nil {
			return Reader{}, err
		}
		if err := r.Skip(); err != nil {
			return Reader{}, err
		}
	}
	return Reader{}, ErrNotFound
}

// Validate checks that b is exactly one well-formed value: in bounds, at most
// MaxDepth nested containers, no extension types or 0xc1, only str map keys,
// no trailing bytes. It does not check UTF-8 (see ValidateUTF8).
func Validate(b []byte) error { return validate(b, false, MaxDepth) }

// ValidateUTF8 is Validate plus: every str (keys included) is UTF-8.
func ValidateUTF8(b []byte) error { return validate(b, true, MaxDepth) }

// ValidateIn is Validate for a value that will sit inside `enclosing`
// containers of a larger document: it may nest MaxDepth-enclosing deep.
func ValidateIn(b []byte, enclosing int) error {
	return validate(b, false, MaxDepth-max(enclosing, 0))
}

func validate(b []byte, checkUTF8 bool, maxDepth int) error {
	end, err := walk(b, 0, true, checkUTF8, maxDepth)
	if err != nil {
		return err
	}
	if end != len(b) {
		return ErrTrailing
	}
	return nil
}

// Decode reads one complete value into Go values: nil, bool, int64 (uint64
// above math.MaxInt64), float64, string, []byte (a copy), []any and
// map[string]any. A non-string map key is ErrKey. Nesting is limited to
// MaxDepth; on error the reader does not move.
func (r *Reader) Decode() (any, error) {
	c := *r
	v, err := c.decode(0)
	if err == nil {
		*r = c
	}
	return v, err
}

func (r *Reader) decode(depth int) (any, error) {
	t, err := r.Next()
	if err != nil {
		return nil, err
	}
	switch t.Kind {
	case Nil:
		return nil, nil
	case Bool:
		return t.Bool, nil
	case Int:
		return t.Int, nil
	case Uint:
		return t.Uint, nil
	case Float:
		return t.Float, nil
	case Str:
		return string(t.Bytes), nil
	case Bin:
		return append([]byte{}, t.Bytes...), nil
	}
	if depth == MaxDepth {
		return nil, ErrDepth
	}
	if t.Kind == Array {
		out := make([]any, 0, t.Len)
		for i := uint32(0); i < t.Len; i++ {
			v, err := r.decode(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	out := make(map[string]any, min(t.Len, 64))
	for i := uint32(0); i < t.Len; i++ {
		k, err := r.ReadStringBytes()
		if err == ErrType {
			return nil, ErrKey
		} else if err != nil {
			return nil, err
		}
		v, err := r.decode(depth + 1)
		if err != nil {
			return nil, err
		}
		out[string(k)] = v
	}
	return out, nil
}
