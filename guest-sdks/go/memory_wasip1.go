//go:build wasip1

package wasmext

import (
	"runtime"
	"unsafe"

	"wasmext.dev/wasmext/raw"
)

// Memory the host and the guest hand each other (SPEC 1.4).
//
// Go's garbage collector does not move heap objects, but it frees any it
// cannot reach from Go. Every region wasmext_alloc hands to the host is
// therefore kept in this table until the host gives it back with
// wasmext_free (input regions) or the SDK takes it over (host_call answers).
// A region is a []uint64, which the allocator aligns to 8 as SPEC 1.1 asks.
var regions = map[uint32][]uint64{}

func allocRegion(size uint32) uint32 {
	words := (uint64(size) + 7) / 8
	if words == 0 {
		words = 1 // a real address even for size 0
	}
	region := make([]uint64, words)
	ptr := uint32(uintptr(unsafe.Pointer(&region[0])))
	regions[ptr] = region
	return ptr
}

func freeRegion(ptr uint32) { delete(regions, ptr) }

// regionBytes is the region starting at ptr as bytes, if the SDK handed it out.
func regionBytes(ptr uint32) ([]byte, bool) {
	region, ok := regions[ptr]
	if !ok {
		return nil, false
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&region[0])), len(region)*8), true
}

// answerArea is the area declared as "answer_region" to a host of minor 3
// (SPEC 1.4.1): the host writes an answer that fits here instead of entering
// wasmext_alloc a second time. sendHostCall copies an answer found here into
// a slice of its own at once, so an Answer outlives the host calls after it.
// A global never moves and is never freed; []uint64 aligns it to 8.
var answerArea [answerAreaSize / 8]uint64

// answerRegion is the area's address and size, for the registration map.
func answerRegion() (ptr, size uint32, ok bool) {
	return uint32(uintptr(unsafe.Pointer(&answerArea[0]))), answerAreaSize, true
}

func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// sendHostCall hands the request to the host and takes over the region the
// host wrote the answer into: it leaves the table and lives on as the
// answer's bytes, for the garbage collector to reclaim once unused.
func sendHostCall(request []byte) ([]byte, string) {
	packed := raw.HostCall(addr(request), uint32(len(request)))
	runtime.KeepAlive(request)
	if packed == 0 {
		return nil, "the host could not deliver an answer"
	}
	ptr, n := raw.Unpack(packed)
	if area, size, _ := answerRegion(); ptr == area {
		if n > size {
			return nil, "the host's answer is longer than the answer region"
		}
		written := unsafe.Slice((*byte)(unsafe.Pointer(&answerArea[0])), n)
		return append([]byte(nil), written...), ""
	}
	region, ok := regionBytes(ptr)
	if !ok {
		return nil, "the host's answer is not in a region from wasmext_alloc"
	}
	freeRegion(ptr)
	if int(n) > len(region) {
		return nil, "the host's answer is longer than its region"
	}
	return region[:n:n], ""
}

func writeLog(level LogLevel, text string) {
	n := len(text)
	if uint64(n) > 1<<32-1 {
		n = 1<<32 - 1
	}
	raw.Log(int32(level), uint32(uintptr(unsafe.Pointer(unsafe.StringData(text)))), uint32(n))
	runtime.KeepAlive(text)
}
