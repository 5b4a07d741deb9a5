//go:build wasip1

package raw

// HostCall sends the MessagePack request map at [ptr, ptr+length) to the host
// and returns the packed answer region, which the host obtained from
// wasmext_alloc during the call (0: no answer could be delivered).
//
//go:wasmimport wasmext host_call
func HostCall(ptr, length uint32) uint64

// Log writes the UTF-8 text at [ptr, ptr+length) to the plugin log at level
// (0 trace, 1 debug, 2 info, 3 warn, 4 error).
//
//go:wasmimport wasmext log
func Log(level int32, ptr, length uint32)
