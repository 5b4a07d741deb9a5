//go:build wasip1

package wasmext

import "wasmext.dev/wasmext/raw"

// The ABI exports (SPEC 1.1). Go's c-shared build adds _initialize, which
// starts the runtime and runs the init functions (where the plugin calls
// Register); there is no _start.

//go:wasmexport wasmext_abi_version
func exportABIVersion() int32 { return ABIMajor }

// exportAlloc hands the host a region aligned to 8, kept alive in the
// region table until wasmext_free (or until the SDK takes a host_call answer
// over). Go cannot report an allocation failure: an allocation beyond the
// memory cap ends the instance, which the host reports as
// MemoryLimitExceeded.
//
//go:wasmexport wasmext_alloc
func exportAlloc(size uint32) uint32 { return allocRegion(size) }

//go:wasmexport wasmext_free
func exportFree(ptr, size uint32) { freeRegion(ptr) }

//go:wasmexport wasmext_register
func exportRegister(ptr, length uint32) uint64 {
	request, _ := input(ptr, length) // an unreadable request only loses facts
	return pack(handleRegister(request))
}

//go:wasmexport wasmext_call
func exportCall(ptr, length uint32) uint64 {
	request, ok := input(ptr, length)
	if !ok {
		return pack(failure(CodeInvalid, "the request is not in a region from wasmext_alloc"))
	}
	return pack(handleCall(request))
}

// input is the request the host wrote into a region it got from
// wasmext_alloc (and keeps: the SDK only reads it).
func input(ptr, length uint32) ([]byte, bool) {
	region, ok := regionBytes(ptr)
	if !ok || int(length) > len(region) {
		return nil, false
	}
	return region[:length:length], true
}

// pack hands a response to the host; the bytes stay in a package-level
// buffer, untouched until the next entry.
func pack(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return raw.Pack(addr(b), uint32(len(b)))
}
