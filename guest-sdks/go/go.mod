module wasmext.dev/wasmext

go 1.24
