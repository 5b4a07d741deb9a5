// Package raw is the lowest layer of the wasmext Go SDK: the two ABI imports
// exactly as abi/SPEC.md section 1.2 declares them, the export names, and the
// packed (ptr << 32) | len handle of section 1.3. Nothing here checks
// anything; use it only to write a runtime of your own. Plugins use package
// wasmext instead.
//
// HostCall and Log exist on GOOS=wasip1 only; elsewhere they panic, so that
// code using them still compiles and unit-tests natively.
package raw

// Import module and names (SPEC 1.2).
const (
	ImportModule   = "wasmext"
	ImportHostCall = "host_call"
	ImportLog      = "log"
)

// Export names (SPEC 1.1). The wasmext package defines all of them.
const (
	ExportMemory     = "memory"
	ExportABIVersion = "wasmext_abi_version"
	ExportAlloc      = "wasmext_alloc"
	ExportFree       = "wasmext_free"
	ExportRegister   = "wasmext_register"
	ExportCall       = "wasmext_call"
	ExportInitialize = "_initialize"
)

// Pack makes the i64 that hands a buffer to the other side: (ptr << 32) | len.
func Pack(ptr, length uint32) uint64 { return uint64(ptr)<<32 | uint64(length) }

// Unpack splits a packed buffer handle into its pointer and length.
func Unpack(packed uint64) (ptr, length uint32) { return uint32(packed >> 32), uint32(packed) }
