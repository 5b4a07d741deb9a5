//! Layer 1: the two ABI imports exactly as SPEC 1.2 declares them, and the
//! `(ptr << 32) | len` packing of buffers (SPEC 1.3). Nothing here checks
//! anything; use it only to build a runtime of your own.

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "wasmext")]
extern "C" {
    #[link_name = "host_call"]
    fn wasmext_host_call(ptr: *const u8, len: u32) -> u64;
    #[link_name = "log"]
    fn wasmext_log(level: i32, ptr: *const u8, len: u32);
}

/// `wasmext.host_call(ptr, len) -> i64`: send an encoded request map; the
/// answer comes back packed (0: no answer).
///
/// # Safety
/// `ptr..ptr+len` must be readable guest memory.
#[cfg(target_arch = "wasm32")]
pub unsafe fn host_call(ptr: *const u8, len: u32) -> u64 {
    wasmext_host_call(ptr, len)
}

/// `wasmext.log(level, ptr, len)`: log UTF-8 text directly.
///
/// # Safety
/// `ptr..ptr+len` must be readable guest memory.
#[cfg(target_arch = "wasm32")]
pub unsafe fn log(level: i32, ptr: *const u8, len: u32) {
    wasmext_log(level, ptr, len)
}

/// Off wasm (the SDK's native unit tests) there is no host: every host call
/// answers "nothing".
///
/// # Safety
/// Always safe; `unsafe` only to match the wasm signature.
#[cfg(not(target_arch = "wasm32"))]
pub unsafe fn host_call(_ptr: *const u8, _len: u32) -> u64 {
    0
}

/// Off wasm, log lines are dropped.
///
/// # Safety
/// Always safe; `unsafe` only to match the wasm signature.
#[cfg(not(target_arch = "wasm32"))]
pub unsafe fn log(_level: i32, _ptr: *const u8, _len: u32) {}

/// `(ptr << 32) | len`.
#[inline]
pub const fn pack(ptr: u32, len: u32) -> u64 {
    ((ptr as u64) << 32) | len as u64
}

/// The pointer half of a packed buffer.
#[inline]
pub const fn packed_ptr(packed: u64) -> u32 {
    (packed >> 32) as u32
}

/// The length half of a packed buffer.
#[inline]
pub const fn packed_len(packed: u64) -> u32 {
    packed as u32
}
