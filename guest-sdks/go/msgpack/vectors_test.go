package msgpack

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// The vectors of abi/vectors: $WASMEXT_VECTORS, else the checkout's folder.
func vectorsDir() string {
	if dir := os.Getenv("WASMEXT_VECTORS"); dir != "" {
		return dir
	}
	return filepath.Join("..", "..", "..", "abi", "vectors")
}

type vector struct {
	Name  string          `json:"name"`
	Hex   string          `json:"hex"`
	Value json.RawMessage `json:"value"`
}

func loadVectors(t *testing.T, file string) map[string][]vector {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(vectorsDir(), file))
	if err != nil {
		t.Fatalf("cannot read the ABI vectors (set WASMEXT_VECTORS): %v", err)
	}
	var out map[string][]vector
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ordered is a JSON object with its key order, so that encoding it gives the
// vector's bytes (map16 and nested vectors depend on the order).
type ordered struct {
	keys []string
	vals []any
}

// fromJSON turns a vector value into Go values: {"$bin": hex} is []byte,
// {"$f64": text} a float64, objects ordered, numbers int64 or uint64.
func fromJSON(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readJSON(dec)
	if err != nil {
		t.Fatalf("vector value %s: %v", raw, err)
	}
	return v
}

func readJSON(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '[' {
			list := []any{}
			for dec.More() {
				v, err := readJSON(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		obj := ordered{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := readJSON(dec)
			if err != nil {
				return nil, err
			}
			obj.keys = append(obj.keys, k.(string))
			obj.vals = append(obj.vals, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
		if len(obj.keys) == 1 && obj.keys[0] == "$bin" {
			return hex.DecodeString(obj.vals[0].(string))
		}
		if len(obj.keys) == 1 && obj.keys[0] == "$f64" {
			return strconv.ParseFloat(obj.vals[0].(string), 64)
		}
		return obj, nil
	case json.Number:
		if i, err := strconv.ParseInt(tok.String(), 10, 64); err == nil {
			return i, nil
		}
		return strconv.ParseUint(tok.String(), 10, 64)
	default:
		return tok, nil // nil, bool, string
	}
}

// encodeOrdered writes a vector value keeping object key order.
func encodeOrdered(w *Writer, v any) {
	switch v := v.(type) {
	case ordered:
		w.WriteMapHeader(len(v.keys))
		for i, k := range v.keys {
			w.WriteString(k)
			encodeOrdered(w, v.vals[i])
		}
	case []any:
		w.WriteArrayHeader(len(v))
		for _, x := range v {
			encodeOrdered(w, x)
		}
	default:
		if err := w.WriteValue(v); err != nil {
			panic(err)
		}
	}
}

// plain turns ordered objects into map[string]any, to compare with Decode.
func plain(v any) any {
	switch v := v.(type) {
	case ordered:
		m := map[string]any{}
		for i, k := range v.keys {
			m[k] = plain(v.vals[i])
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = plain(x)
		}
		return out
	}
	return v
}

func TestCanonicalVectors(t *testing.T) {
	vectors := loadVectors(t, "msgpack.json")["canonical"]
	if len(vectors) < 20 {
		t.Fatalf("only %d canonical vectors", len(vectors))
	}
	for _, v := range vectors {
		want := mustHex(t, v.Hex)
		value := fromJSON(t, v.Value)

		var w Writer
		encodeOrdered(&w, value)
		if w.Err() != nil || !bytes.Equal(w.Bytes(), want) {
			t.Errorf("%s: writer gave %x (err %v), want %x", v.Name, w.Bytes(), w.Err(), want)
		}

		r := NewReader(want)
		got, err := r.Decode()
		if err != nil || !r.AtEnd() || !reflect.DeepEqual(got, plain(value)) {
			t.Errorf("%s: Decode gave %#v (err %v)", v.Name, got, err)
		}

		var c Writer
		r = NewReader(want)
		if err := c.CopyValue(&r); err != nil || !bytes.Equal(c.Bytes(), want) || !r.AtEnd() {
			t.Errorf("%s: CopyValue gave %x (err %v)", v.Name, c.Bytes(), err)
		}
		for _, check := range []func([]byte) error{Validate, ValidateUTF8} {
			if err := check(want); err != nil {
				t.Errorf("%s: refused: %v", v.Name, err)
			}
		}
		r = NewReader(want)
		if err := r.Skip(); err != nil || !r.AtEnd() {
			t.Errorf("%s: Skip stopped at %d (err %v)", v.Name, r.Pos(), err)
		}
		checkTruncations(t, v.Name, want)
	}
}

// Every proper prefix of a value is refused, by every reader entry point.
func checkTruncations(t *testing.T, name string, whole []byte) {
	t.Helper()
	for n := 0; n < len(whole); n++ {
		b := whole[:n]
		if Validate(b) == nil {
			t.Errorf("%s: Validate accepted the first %d bytes", name, n)
		}
		r := NewReader(b)
		if r.Skip() == nil || r.Pos() != 0 {
			t.Errorf("%s: Skip accepted the first %d bytes", name, n)
		}
		if _, err := r.Decode(); err == nil || r.Pos() != 0 {
			t.Errorf("%s: Decode accepted the first %d bytes", name, n)
		}
		var w Writer
		if w.CopyValue(&r) == nil || w.Len() != 0 || r.Pos() != 0 {
			t.Errorf("%s: CopyValue accepted the first %d bytes", name, n)
		}
	}
}

func TestDecodeOnlyVectors(t *testing.T) {
	vectors := loadVectors(t, "msgpack.json")["decode_only"]
	if len(vectors) == 0 {
		t.Fatal("no decode_only vectors")
	}
	for _, v := range vectors {
		b := mustHex(t, v.Hex)
		value := fromJSON(t, v.Value)
		r := NewReader(b)
		got, err := r.Decode()
		if err != nil || !reflect.DeepEqual(got, plain(value)) {
			t.Errorf("%s: Decode gave %#v (err %v)", v.Name, got, err)
		}
		// Re-encoding gives the canonical bytes of the same value.
		var want, c Writer
		encodeOrdered(&want, value)
		r = NewReader(b)
		if err := c.CopyValue(&r); err != nil || !bytes.Equal(c.Bytes(), want.Bytes()) {
			t.Errorf("%s: CopyValue gave %x, want %x (err %v)", v.Name, c.Bytes(), want.Bytes(), err)
		}
		checkTruncations(t, v.Name, b)
	}
}

func TestHostileVectors(t *testing.T) {
	vectors := loadVectors(t, "hostile.json")["hostile"]
	if len(vectors) == 0 {
		t.Fatal("no hostile vectors")
	}
	for _, v := range vectors {
		b := mustHex(t, v.Hex)
		if err := ValidateUTF8(b); err == nil {
			t.Errorf("%s: ValidateUTF8 accepted %x", v.Name, b)
		}
		// Without the UTF-8 check everything but the bad text is still refused.
		err := Validate(b)
		if (err == nil) != (v.Name == "invalid utf-8 in str") {
			t.Errorf("%s: Validate said %v", v.Name, err)
		}
		// Reading never panics and never accepts a truncated or malformed value.
		r := NewReader(b)
		_, derr := r.Decode()
		if derr == nil && r.AtEnd() && v.Name != "invalid utf-8 in str" {
			t.Errorf("%s: Decode accepted %x", v.Name, b)
		}
		var w Writer
		r = NewReader(b)
		_ = w.CopyValue(&r)
	}
}

func TestHugeDeclaredLengthsFailFast(t *testing.T) {
	for _, h := range []string{
		"dbffffffff41", "c6ffffffff00", "ddffffffff", "dfffffffff", "dc0010c0", "de0008c0c0",
		"da0005616263", "c50003aabb", "d90241", "c40201", "95c0c0", "85a161c0",
	} {
		b := mustHex(t, h)
		r := NewReader(b)
		if _, err := r.Next(); !errors.Is(err, ErrTruncated) {
			t.Errorf("%s: Next said %v", h, err)
		}
		if err := r.Skip(); !errors.Is(err, ErrTruncated) {
			t.Errorf("%s: Skip said %v", h, err)
		}
		if _, err := r.Decode(); !errors.Is(err, ErrTruncated) {
			t.Errorf("%s: Decode said %v", h, err)
		}
		if !errors.Is(Validate(b), ErrTruncated) || r.Pos() != 0 {
			t.Errorf("%s: Validate said %v", h, Validate(b))
		}
	}
}

func nested(open string, depth int, inner string) []byte {
	b := bytes.Repeat([]byte(open), depth)
	return append(b, inner...)
}

func TestDepthLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		open  string
		inner string
	}{
		{"arrays around nil", "\x91", "\xc0"},
		{"arrays around an empty array", "\x91", "\x90"},
		{"maps around nil", "\x81\xa1k", "\xc0"},
		{"array16s around an int", "\xdc\x00\x01", "\x05"},
	} {
		// The innermost container counts: "around an empty array" holds one more.
		extra := 0
		if c.inner == "\x90" {
			extra = 1
		}
		ok := nested(c.open, MaxDepth-extra, c.inner)
		deep := nested(c.open, MaxDepth+1-extra, c.inner)
		if err := Validate(ok); err != nil {
			t.Errorf("%s: depth 64 refused: %v", c.name, err)
		}
		if err := Validate(deep); !errors.Is(err, ErrDepth) {
			t.Errorf("%s: depth 65 gave %v", c.name, err)
		}
		if err := ValidateIn(ok, 1); !errors.Is(err, ErrDepth) {
			t.Errorf("%s: depth 64 inside one container gave %v", c.name, err)
		}
		if err := ValidateIn(nested(c.open, MaxDepth-1-extra, c.inner), 1); err != nil {
			t.Errorf("%s: depth 63 inside one container refused: %v", c.name, err)
		}
		r := NewReader(ok)
		if err := r.Skip(); err != nil {
			t.Errorf("%s: Skip at depth 64: %v", c.name, err)
		}
		r = NewReader(deep)
		if err := r.Skip(); !errors.Is(err, ErrDepth) {
			t.Errorf("%s: Skip at depth 65: %v", c.name, err)
		}
		r = NewReader(ok)
		if _, err := r.Decode(); err != nil {
			t.Errorf("%s: Decode at depth 64: %v", c.name, err)
		}
		r = NewReader(deep)
		if _, err := r.Decode(); !errors.Is(err, ErrDepth) {
			t.Errorf("%s: Decode at depth 65: %v", c.name, err)
		}
		var w Writer
		r = NewReader(ok)
		if err := w.CopyValue(&r); err != nil || Validate(w.Bytes()) != nil {
			t.Errorf("%s: CopyValue at depth 64: %v", c.name, err)
		}
		w.Reset()
		r = NewReader(deep)
		if err := w.CopyValue(&r); !errors.Is(err, ErrDepth) || w.Len() != 0 {
			t.Errorf("%s: CopyValue at depth 65: %v", c.name, err)
		}
	}
	// WriteValue stops at the same depth (and on cycles).
	var v any = nil
	for i := 0; i < MaxDepth; i++ {
		v = []any{v}
	}
	var w Writer
	if err := w.WriteValue(v); err != nil {
		t.Errorf("WriteValue at depth 64: %v", err)
	}
	w.Reset()
	if err := w.WriteValue([]any{v}); !errors.Is(err, ErrDepth) {
		t.Errorf("WriteValue at depth 65: %v", err)
	}
	cycle := []any{nil}
	cycle[0] = cycle
	w.Reset()
	if err := w.WriteValue(cycle); !errors.Is(err, ErrDepth) {
		t.Errorf("WriteValue of a cycle: %v", err)
	}
}

func TestIntegerBoundaries(t *testing.T) {
	cases := []struct {
		v   any
		hex string
	}{
		{int64(0), "00"}, {int64(127), "7f"}, {int64(128), "cc80"}, {int64(255), "ccff"},
		{int64(256), "cd0100"}, {int64(65535), "cdffff"}, {int64(65536), "ce00010000"},
		{int64(math.MaxUint32), "ceffffffff"}, {int64(math.MaxUint32 + 1), "cf0000000100000000"},
		{int64(math.MaxInt64), "cf7fffffffffffffff"}, {uint64(math.MaxInt64 + 1), "cf8000000000000000"},
		{uint64(math.MaxUint64), "cfffffffffffffffff"}, {int64(-1), "ff"}, {int64(-32), "e0"},
		{int64(-33), "d0df"}, {int64(-128), "d080"}, {int64(-129), "d1ff7f"},
		{int64(-32768), "d18000"}, {int64(-32769), "d2ffff7fff"},
		{int64(math.MinInt32), "d280000000"}, {int64(math.MinInt32 - 1), "d3ffffffff7fffffff"},
		{int64(math.MinInt64), "d38000000000000000"},
	}
	for _, c := range cases {
		var w Writer
		if err := w.WriteValue(c.v); err != nil || hex.EncodeToString(w.Bytes()) != c.hex {
			t.Errorf("%v: wrote %x, want %s", c.v, w.Bytes(), c.hex)
		}
		r := NewReader(w.Bytes())
		got, err := r.Decode()
		if err != nil || got != c.v {
			t.Errorf("%s: decoded %#v (err %v)", c.hex, got, err)
		}
	}
	// Every width of the same small number re-encodes to one byte.
	for _, h := range []string{"cc05", "cd0005", "ce00000005", "cf0000000000000005", "d005",
		"d10005", "d200000005", "d30000000000000005"} {
		var w Writer
		r := NewReader(mustHex(t, h))
		if err := w.CopyValue(&r); err != nil || hex.EncodeToString(w.Bytes()) != "05" {
			t.Errorf("%s: copied as %x (err %v)", h, w.Bytes(), err)
		}
	}
	for _, h := range []string{"d0e0", "d1ffe0", "d2ffffffe0", "d3ffffffffffffffe0"} {
		var w Writer
		r := NewReader(mustHex(t, h))
		if err := w.CopyValue(&r); err != nil || hex.EncodeToString(w.Bytes()) != "e0" {
			t.Errorf("%s: copied as %x (err %v)", h, w.Bytes(), err)
		}
	}
}

func TestLengthBoundaries(t *testing.T) {
	strHeads := map[int]string{0: "a0", 31: "bf", 32: "d920", 255: "d9ff", 256: "da0100",
		65535: "daffff", 65536: "db00010000"}
	binHeads := map[int]string{0: "c400", 1: "c401", 255: "c4ff", 256: "c50100",
		65535: "c5ffff", 65536: "c600010000"}
	for n, head := range strHeads {
		var w Writer
		w.WriteString(string(bytes.Repeat([]byte("a"), n)))
		if got := hex.EncodeToString(w.Bytes()[:len(head)/2]); got != head || w.Len() != n+len(head)/2 {
			t.Errorf("str %d: head %s, want %s", n, got, head)
		}
		checkCopyIsIdentity(t, w.Bytes())
		// The same text in a wider head is copied canonically.
		wide := append(mustHex(t, "db"), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		wide = append(wide, bytes.Repeat([]byte("a"), n)...)
		var c Writer
		r := NewReader(wide)
		if err := c.CopyValue(&r); err != nil || !bytes.Equal(c.Bytes(), w.Bytes()) {
			t.Errorf("str %d: str32 copied to %x...", n, c.Bytes()[:min(8, c.Len())])
		}
	}
	for n, head := range binHeads {
		var w Writer
		w.WriteBin(bytes.Repeat([]byte{7}, n))
		if got := hex.EncodeToString(w.Bytes()[:len(head)/2]); got != head {
			t.Errorf("bin %d: head %s, want %s", n, got, head)
		}
		checkCopyIsIdentity(t, w.Bytes())
	}
	for n, heads := range map[int][2]string{0: {"90", "80"}, 15: {"9f", "8f"},
		16: {"dc0010", "de0010"}, 65535: {"dcffff", "deffff"}, 65536: {"dd00010000", "df00010000"}} {
		var a, m Writer
		a.WriteArrayHeader(n)
		m.WriteMapHeader(n)
		if hex.EncodeToString(a.Bytes()) != heads[0] || hex.EncodeToString(m.Bytes()) != heads[1] {
			t.Errorf("container %d: %x %x", n, a.Bytes(), m.Bytes())
		}
		items := make([]any, n)
		var full Writer
		if err := full.WriteValue(items); err != nil {
			t.Fatal(err)
		}
		checkCopyIsIdentity(t, full.Bytes())
	}
}

func checkCopyIsIdentity(t *testing.T, b []byte) {
	t.Helper()
	var c Writer
	r := NewReader(b)
	if err := c.CopyValue(&r); err != nil || !bytes.Equal(c.Bytes(), b) {
		t.Errorf("CopyValue changed a canonical value of %d bytes (err %v)", len(b), err)
	}
}

func TestFloats(t *testing.T) {
	for _, f := range []float64{0, -0.25, 1.5, math.Inf(1), math.MaxFloat64, math.SmallestNonzeroFloat64} {
		var w Writer
		w.WriteFloat(f)
		r := NewReader(w.Bytes())
		got, err := r.ReadFloat()
		if err != nil || got != f || w.Len() != 9 {
			t.Errorf("%v: read back %v (err %v)", f, got, err)
		}
	}
	r := NewReader(mustHex(t, "ca3fc00000"))
	if f, err := r.ReadFloat(); err != nil || f != 1.5 {
		t.Errorf("float32: %v %v", f, err)
	}
	r = NewReader(mustHex(t, "d0f6"))
	if f, err := r.ReadFloat(); err != nil || f != -10 {
		t.Errorf("int as float: %v %v", f, err)
	}
}

func TestTypedReadsLeaveTheCursorOnError(t *testing.T) {
	doc := mustHex(t, "93a3616263cff000000000000000ff") // ["abc", 2^64-2^60, -1]
	r := NewReader(doc)
	if _, err := r.ReadMapLen(); !errors.Is(err, ErrType) || r.Pos() != 0 {
		t.Fatalf("ReadMapLen on an array: %v at %d", err, r.Pos())
	}
	if n, err := r.ReadArrayLen(); err != nil || n != 3 {
		t.Fatal(n, err)
	}
	if _, err := r.ReadInt(); !errors.Is(err, ErrType) || r.Pos() != 1 {
		t.Fatalf("ReadInt on a str: %v", err)
	}
	if _, err := r.ReadBin(); !errors.Is(err, ErrType) {
		t.Fatalf("ReadBin on a str: %v", err)
	}
	if s, err := r.ReadString(); err != nil || s != "abc" {
		t.Fatal(s, err)
	}
	if _, err := r.ReadInt(); !errors.Is(err, ErrRange) || r.Pos() != 5 {
		t.Fatalf("ReadInt above MaxInt64: %v", err)
	}
	if u, err := r.ReadUint(); err != nil || u != 0xf000000000000000 {
		t.Fatal(u, err)
	}
	if _, err := r.ReadUint(); !errors.Is(err, ErrRange) {
		t.Fatalf("ReadUint of -1: %v", err)
	}
	if _, err := r.ReadBool(); !errors.Is(err, ErrType) {
		t.Fatalf("ReadBool of an int: %v", err)
	}
	if i, err := r.ReadInt(); err != nil || i != -1 || !r.AtEnd() || r.Finish() != nil {
		t.Fatal(i, err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Next at the end: %v", err)
	}
	r = NewReader(mustHex(t, "c0c0"))
	if err := r.ReadNil(); err != nil || r.Finish() != ErrTrailing {
		t.Fatal("trailing bytes not reported")
	}
}

func TestLookupAndSub(t *testing.T) {
	var w Writer
	w.WriteMapHeader(3)
	w.WriteString("a")
	w.WriteArrayHeader(2)
	w.WriteInt(1)
	w.WriteInt(2)
	w.WriteString("b")
	w.WriteString("text")
	w.WriteString("c")
	w.WriteNil()
	doc := NewReader(w.Bytes())
	b, err := doc.Lookup("b")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := b.ReadString(); err != nil || s != "text" {
		t.Fatal(s, err)
	}
	if _, err := doc.Lookup("zz"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	a, _ := doc.Lookup("a")
	sub, err := a.Sub()
	if err != nil {
		t.Fatal(err)
	}
	if raw := sub.buf; hex.EncodeToString(raw) != "920102" {
		t.Fatalf("Sub holds %x", raw)
	}
	if _, err := NewReader([]byte{0x91, 0xc0}).Lookup("a"); !errors.Is(err, ErrType) {
		t.Fatal("Lookup on an array", err)
	}
}

func TestWriterErrorsAreSticky(t *testing.T) {
	var w Writer
	w.WriteArrayHeader(2)
	w.WriteString("ok")
	w.WriteString("bad \xff")
	w.WriteInt(5)
	if !errors.Is(w.Err(), ErrUTF8) || w.Len() != 4 {
		t.Fatalf("err %v, %d bytes", w.Err(), w.Len())
	}
	w.Truncate(1)
	if w.Err() != nil || w.Len() != 1 {
		t.Fatal("Truncate did not clear the error")
	}
	w.WriteStringBytes([]byte{0xc3, 0x28})
	if !errors.Is(w.Err(), ErrUTF8) {
		t.Fatal("WriteStringBytes took invalid UTF-8")
	}
	w.Reset()
	if err := w.WriteValue(struct{}{}); !errors.Is(err, ErrType) || !errors.Is(w.Err(), ErrType) {
		t.Fatal("unsupported type accepted", err)
	}
	w.Reset()
	w.WriteArrayHeader(-1)
	if !errors.Is(w.Err(), ErrTooLong) {
		t.Fatal("negative length accepted")
	}
}

func TestWriteValueTypes(t *testing.T) {
	var w Writer
	err := w.WriteValue(map[string]any{
		"z": []string{"a"}, "a": map[string]string{"y": "1", "x": "2"},
		"m": []any{int8(-1), uint16(300), float32(0.5), true, nil, []byte{1}, Raw{0xc3}},
	})
	want := "83" + "a161" + "82a178a132a179a131" + "a16d" + "97ffcd012ccb3fe0000000000000c3c0c40101c3" +
		"a17a" + "91a161"
	if err != nil || hex.EncodeToString(w.Bytes()) != want {
		t.Fatalf("got %x (err %v)\nwant %s", w.Bytes(), err, want)
	}
	var framed Writer
	framed.StartAfter([]byte{0x81, 0xa1, 'v'})
	framed.WriteInt(7)
	framed.Reset()
	framed.WriteInt(8)
	if hex.EncodeToString(framed.Framed()) != "81a17608" || framed.Len() != 1 {
		t.Fatalf("framed %x", framed.Framed())
	}
}

func TestUTF8Validation(t *testing.T) {
	for _, c := range []struct {
		hex string
		ok  bool
	}{
		{"a3e282ac", true}, {"a4f09f9880", true}, {"a2c328", false}, {"a3eda080", false}, // surrogate
		{"a2c0af", false}, {"a4f4908080", false}, {"81a2c328c0", false}, // bad key
	} {
		err := ValidateUTF8(mustHex(t, c.hex))
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", c.hex, err)
		}
	}
}

// Random mutations of the vectors: readers never panic, and whatever
// Validate accepts copies to a canonical form that copies to itself.
func TestMutations(t *testing.T) {
	var seeds [][]byte
	for _, v := range loadVectors(t, "msgpack.json")["canonical"] {
		seeds = append(seeds, mustHex(t, v.Hex))
	}
	rng := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return rng
	}
	for i := 0; i < 50000; i++ {
		b := append([]byte{}, seeds[next()%uint64(len(seeds))]...)
		for j := next() % 4; j <= 3 && len(b) > 0; j++ {
			switch next() % 3 {
			case 0:
				b[next()%uint64(len(b))] = byte(next())
			case 1:
				b = b[:next()%uint64(len(b))]
			default:
				at := next() % uint64(len(b)+1)
				b = append(b[:at], append([]byte{byte(next())}, b[at:]...)...)
			}
		}
		checkNoSurprises(t, b)
	}
}

func FuzzReader(f *testing.F) {
	f.Add(mustHexF("82a16101a16292c3c2"))
	f.Add(mustHexF("dc0003cc05d0e0ca3fc00000"))
	f.Fuzz(func(t *testing.T, b []byte) { checkNoSurprises(t, b) })
}

func mustHexF(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}

func checkNoSurprises(t *testing.T, b []byte) {
	r := NewReader(b)
	_, _ = r.Decode()
	r = NewReader(b)
	for i := 0; i < 64 && !r.AtEnd(); i++ {
		if _, err := r.Next(); err != nil {
			break
		}
	}
	if Validate(b) != nil {
		return
	}
	var once, twice Writer
	r = NewReader(b)
	if err := once.CopyValue(&r); err != nil || !r.AtEnd() {
		t.Fatalf("%x: valid but CopyValue said %v", b, err)
	}
	r = NewReader(once.Bytes())
	if err := twice.CopyValue(&r); err != nil || !bytes.Equal(once.Bytes(), twice.Bytes()) {
		t.Fatalf("%x: canonical copy %x is not stable (%x, %v)", b, once.Bytes(), twice.Bytes(), err)
	}
	if err := Validate(once.Bytes()); err != nil {
		t.Fatalf("%x: canonical copy %x invalid: %v", b, once.Bytes(), err)
	}
	r = NewReader(b)
	if _, err := r.Decode(); err != nil {
		t.Fatalf("%x: valid but Decode said %v", b, err)
	}
}
