package msgpack

import (
	"math"
	"slices"
	"unicode/utf8"
)

// Writer appends MessagePack to a growable buffer, always in the smallest
// encoding (the canonical bytes of abi/vectors/msgpack.json); floats are
// always written as float64. The zero value is ready to use.
//
// Errors are sticky: after the first error (a length over 2^32-1, a string
// that is not UTF-8) every later write is a no-op and Err reports it, so code
// can write a whole value and check once.
type Writer struct {
	buf  []byte
	err  error
	head int // bytes of buf before what Bytes shows (see StartAfter)
}

// NewWriter returns a writer whose buffer starts with room for capacity bytes.
func NewWriter(capacity int) *Writer { return &Writer{buf: make([]byte, 0, capacity)} }

// Bytes returns the bytes written so far (a view: valid until the next write or Reset).
func (w *Writer) Bytes() []byte { return w.buf[w.head:] }

// Len is the number of bytes written so far.
func (w *Writer) Len() int { return len(w.buf) - w.head }

// Err is the first error of any write since the last Reset.
func (w *Writer) Err() error { return w.err }

// Reset empties the writer and clears its error, keeping the buffer's memory.
func (w *Writer) Reset() {
	w.buf = w.buf[:w.head]
	w.err = nil
}

// Truncate cuts the written bytes back to the first n (0 <= n <= Len) and
// clears the error.
func (w *Writer) Truncate(n int) {
	w.buf = w.buf[:w.head+n]
	w.err = nil
}

// StartAfter empties the writer and puts head in front of everything written
// from now on: Bytes, Len, Reset and Truncate leave it alone, Framed returns
// it with what follows. (The SDK's reply writer has the response's first
// bytes there, so a reply value is written in place, never copied.)
func (w *Writer) StartAfter(head []byte) {
	w.buf = append(w.buf[:0], head...)
	w.head = len(head)
	w.err = nil
}

// Framed returns the head given to StartAfter followed by Bytes.
func (w *Writer) Framed() []byte { return w.buf }

func (w *Writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *Writer) head8(c, n byte) {
	w.buf = append(w.buf, c, n)
}

func (w *Writer) head16(c byte, n uint32) {
	w.buf = append(w.buf, c, byte(n>>8), byte(n))
}

func (w *Writer) head32(c byte, n uint32) {
	w.buf = append(w.buf, c, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func (w *Writer) head64(c byte, n uint64) {
	w.buf = append(w.buf, c, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
		byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// WriteNil writes nil.
func (w *Writer) WriteNil() {
	if w.err == nil {
		w.buf = append(w.buf, 0xc0)
	}
}

// WriteBool writes true or false.
func (w *Writer) WriteBool(v bool) {
	if w.err != nil {
		return
	}
	if v {
		w.buf = append(w.buf, 0xc3)
	} else {
		w.buf = append(w.buf, 0xc2)
	}
}

// WriteInt writes an integer in the smallest encoding (non-negative values
// as unsigned, like every MessagePack encoder that follows the spec).
func (w *Writer) WriteInt(v int64) {
	switch {
	case w.err != nil:
	case v >= 0:
		w.WriteUint(uint64(v))
	case v >= -32:
		w.buf = append(w.buf, byte(v))
	case v >= math.MinInt8:
		w.head8(0xd0, byte(v))
	case v >= math.MinInt16:
		w.head16(0xd1, uint32(v))
	case v >= math.MinInt32:
		w.head32(0xd2, uint32(v))
	default:
		w.head64(0xd3, uint64(v))
	}
}

// WriteUint writes an unsigned integer in the smallest encoding.
func (w *Writer) WriteUint(v uint64) {
	switch {
	case w.err != nil:
	case v <= 0x7f:
		w.buf = append(w.buf, byte(v))
	case v <= math.MaxUint8:
		w.head8(0xcc, byte(v))
	case v <= math.MaxUint16:
		w.head16(0xcd, uint32(v))
	case v <= math.MaxUint32:
		w.head32(0xce, uint32(v))
	default:
		w.head64(0xcf, v)
	}
}

// WriteFloat writes a float64.
func (w *Writer) WriteFloat(v float64) {
	if w.err == nil {
		w.head64(0xcb, math.Float64bits(v))
	}
}

func (w *Writer) strHead(n int) bool {
	switch {
	case w.err != nil:
		return false
	case uint64(n) > MaxLen:
		w.fail(ErrTooLong)
		return false
	case n < 32:
		w.buf = append(w.buf, 0xa0|byte(n))
	case n <= math.MaxUint8:
		w.head8(0xd9, byte(n))
	case n <= math.MaxUint16:
		w.head16(0xda, uint32(n))
	default:
		w.head32(0xdb, uint32(n))
	}
	return true
}

// WriteString writes a str. A string that is not valid UTF-8 is refused
// (ErrUTF8): the host would refuse the whole response.
func (w *Writer) WriteString(s string) {
	if w.err != nil {
		return
	}
	if !utf8.ValidString(s) {
		w.fail(ErrUTF8)
		return
	}
	if w.strHead(len(s)) {
		w.buf = append(w.buf, s...)
	}
}

// WriteStringBytes writes UTF-8 text held in a byte slice as a str (ErrUTF8
// when it is not UTF-8).
func (w *Writer) WriteStringBytes(s []byte) {
	if w.err != nil {
		return
	}
	if !utf8.Valid(s) {
		w.fail(ErrUTF8)
		return
	}
	if w.strHead(len(s)) {
		w.buf = append(w.buf, s...)
	}
}

// writeStrUnchecked writes text already known to be UTF-8 (read from the
// host, which only ever sends valid UTF-8).
func (w *Writer) writeStrUnchecked(s []byte) {
	if w.strHead(len(s)) {
		w.buf = append(w.buf, s...)
	}
}

// WriteBin writes a bin.
func (w *Writer) WriteBin(b []byte) {
	if w.binHead(len(b)) {
		w.buf = append(w.buf, b...)
	}
}

func (w *Writer) binHead(n int) bool {
	switch {
	case w.err != nil:
		return false
	case uint64(n) > MaxLen:
		w.fail(ErrTooLong)
		return false
	case n <= math.MaxUint8:
		w.head8(0xc4, byte(n))
	case n <= math.MaxUint16:
		w.head16(0xc5, uint32(n))
	default:
		w.head32(0xc6, uint32(n))
	}
	return true
}

func (w *Writer) containerHead(fix, c16, c32 byte, n int) {
	switch {
	case w.err != nil:
	case n < 0 || uint64(n) > MaxLen:
		w.fail(ErrTooLong)
	case n < 16:
		w.buf = append(w.buf, fix|byte(n))
	case n <= math.MaxUint16:
		w.head16(c16, uint32(n))
	default:
		w.head32(c32, uint32(n))
	}
}

// WriteArrayHeader starts an array; write its n items next.
func (w *Writer) WriteArrayHeader(n int) { w.containerHead(0x90, 0xdc, 0xdd, n) }

// WriteMapHeader starts a map; write its n key/value pairs next (keys are
// str in every ABI document).
func (w *Writer) WriteMapHeader(n int) { w.containerHead(0x80, 0xde, 0xdf, n) }

// WriteRaw appends bytes as they are: an already-encoded value (or several).
// Nothing is checked.
func (w *Writer) WriteRaw(b []byte) {
	if w.err == nil {
		w.buf = append(w.buf, b...)
	}
}

// WriteToken writes one token as Next returns it (for Array and Map only the
// header: write the items next).
func (w *Writer) WriteToken(t Token) {
	switch t.Kind {
	case Nil:
		w.WriteNil()
	case Bool:
		w.WriteBool(t.Bool)
	case Int:
		w.WriteInt(t.Int)
	case Uint:
		w.WriteUint(t.Uint)
	case Float:
		w.WriteFloat(t.Float)
	case Str:
		w.WriteStringBytes(t.Bytes)
	case Bin:
		w.WriteBin(t.Bytes)
	case Array:
		w.WriteArrayHeader(int(t.Len))
	case Map:
		w.WriteMapHeader(int(t.Len))
	default:
		w.fail(ErrType)
	}
}

// CopyValue reads one complete value from r and writes it again in the
// canonical encoding: a decoded copy, not a byte copy (runs of tokens that
// are canonical already are copied in one go). The value is checked first
// like Skip does (bounds, depth, no ext types); strings are not checked for
// UTF-8 again, as input from the host always is (use ValidateUTF8 first on
// bytes of other origin). On a reader error r does not move and nothing is
// written.
func (w *Writer) CopyValue(r *Reader) error {
	if w.err != nil {
		return w.err
	}
	end, ok := r.checkedEnd()
	if !ok {
		var err error
		if end, err = walk(r.buf, r.pos, false, false, MaxDepth); err != nil {
			return err
		}
	}
	w.copyCanonical(r.buf[r.pos:end])
	r.pos = end
	return w.err
}

// copyCanonical re-encodes well-formed tokens (as walk accepts them) in the
// smallest encoding.
func (w *Writer) copyCanonical(b []byte) {
	run, pos := 0, 0 // b[run:pos] is canonical and not written yet
	for pos < len(b) {
		c := b[pos]
		if c <= 0xbf || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3 {
			pos++ // one-byte heads are canonical; a fixstr brings its text
			if c >= 0xa0 && c <= 0xbf {
				pos += int(c & 0x1f)
			}
			continue
		}
		info := headSize[c-0xc4]
		size := 1 << (info & 3)
		var n uint64
		switch size {
		case 1:
			n = uint64(b[pos+1])
		case 2:
			n = uint64(be16(b[pos+1:]))
		case 4:
			n = uint64(be32(b[pos+1:]))
		default:
			n = be64(b[pos+1:])
		}
		head := pos + 1 + size // end of the head
		next := head           // end of the token
		var canonical bool
		switch info >> 2 {
		case hStr:
			next += int(n)
			canonical = size == sizeFor(n, 32)
		case hBin:
			next += int(n)
			canonical = size == sizeFor(n, 0)
		case hArray, hMap:
			canonical = size == sizeFor(n, 16)
		default:
			switch {
			case c == 0xcb:
				canonical = true
			case c == 0xca:
				canonical = false
			case c <= 0xcf: // uint 8..64
				canonical = size == sizeFor(n, 128)
			default: // int 8..64: negative values that need this width
				v := int64(n<<(64-8*size)) >> (64 - 8*size) // sign-extended
				canonical = v < -32 && size == intSize(v)
			}
		}
		if canonical {
			pos = next
			continue
		}
		w.WriteRaw(b[run:pos])
		switch {
		case info>>2 == hStr:
			w.strHead(int(n))
		case info>>2 == hBin:
			w.binHead(int(n))
		case info>>2 == hArray:
			w.WriteArrayHeader(int(n))
		case info>>2 == hMap:
			w.WriteMapHeader(int(n))
		case c == 0xca:
			w.WriteFloat(float64(math.Float32frombits(uint32(n))))
		case c <= 0xcf:
			w.WriteUint(n)
		default:
			w.WriteInt(int64(n<<(64-8*size)) >> (64 - 8*size))
		}
		run, pos = head, next // a str's or bin's text joins the next run
	}
	w.WriteRaw(b[run:pos])
}

// sizeFor is the size in bytes of the length (or number) field the smallest
// encoding of n uses; 0 when n fits the head byte (below fix).
func sizeFor(n uint64, fix uint64) int {
	switch {
	case n < fix:
		return 0
	case n <= math.MaxUint8:
		return 1
	case n <= math.MaxUint16:
		return 2
	case n <= math.MaxUint32:
		return 4
	}
	return 8
}

// intSize is the size of the number field of the smallest encoding of v < -32.
func intSize(v int64) int {
	switch {
	case v >= math.MinInt8:
		return 1
	case v >= math.MinInt16:
		return 2
	case v >= math.MinInt32:
		return 4
	}
	return 8
}

// Raw is a value already encoded as MessagePack; WriteValue copies it as is.
type Raw []byte

// WriteValue writes a Go value: nil, bool, every int and uint type, float32
// and float64 (as float64), string, []byte (bin), Raw (as is), Token
// (scalars), []any, []string, map[string]any and map[string]string (keys
// sorted, so the bytes are the same every time), and *Writer (its bytes, as
// is). Another type is ErrType, containers nested deeper than MaxDepth are
// ErrDepth; like every writer error, they are sticky.
func (w *Writer) WriteValue(v any) error {
	return w.writeValue(v, 0)
}

func (w *Writer) writeValue(v any, depth int) error {
	if w.err != nil {
		return w.err
	}
	switch v.(type) {
	case []any, []string, map[string]any, map[string]string:
		if depth >= MaxDepth {
			w.fail(ErrDepth)
			return w.err
		}
	}
	switch v := v.(type) {
	case nil:
		w.WriteNil()
	case bool:
		w.WriteBool(v)
	case int:
		w.WriteInt(int64(v))
	case int8:
		w.WriteInt(int64(v))
	case int16:
		w.WriteInt(int64(v))
	case int32:
		w.WriteInt(int64(v))
	case int64:
		w.WriteInt(v)
	case uint:
		w.WriteUint(uint64(v))
	case uint8:
		w.WriteUint(uint64(v))
	case uint16:
		w.WriteUint(uint64(v))
	case uint32:
		w.WriteUint(uint64(v))
	case uint64:
		w.WriteUint(v)
	case uintptr:
		w.WriteUint(uint64(v))
	case float32:
		w.WriteFloat(float64(v))
	case float64:
		w.WriteFloat(v)
	case string:
		w.WriteString(v)
	case []byte:
		w.WriteBin(v)
	case Raw:
		w.WriteRaw(v)
	case *Writer:
		w.WriteRaw(v.Bytes())
	case Token:
		if v.Kind == Array || v.Kind == Map {
			w.fail(ErrType)
		} else {
			w.WriteToken(v)
		}
	case []any:
		w.WriteArrayHeader(len(v))
		for _, x := range v {
			if err := w.writeValue(x, depth+1); err != nil {
				return err
			}
		}
	case []string:
		w.WriteArrayHeader(len(v))
		for _, x := range v {
			w.WriteString(x)
		}
	case map[string]any:
		w.WriteMapHeader(len(v))
		for _, k := range sortedKeys(v) {
			w.WriteString(k)
			if err := w.writeValue(v[k], depth+1); err != nil {
				return err
			}
		}
	case map[string]string:
		w.WriteMapHeader(len(v))
		for _, k := range sortedKeys(v) {
			w.WriteString(k)
			w.WriteString(v[k])
		}
	default:
		w.fail(ErrType)
	}
	return w.err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
