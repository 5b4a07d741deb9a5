//go:build !wasip1

package raw

const notWasm = "wasmext/raw: the host imports exist only in a GOOS=wasip1 build"

// HostCall sends the MessagePack request map at [ptr, ptr+length) to the host
// and returns the packed answer region (wasip1 only; panics elsewhere).
func HostCall(ptr, length uint32) uint64 { panic(notWasm) }

// Log writes the UTF-8 text at [ptr, ptr+length) to the plugin log (wasip1
// only; panics elsewhere).
func Log(level int32, ptr, length uint32) { panic(notWasm) }
