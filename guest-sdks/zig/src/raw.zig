//! Raw layer: the two functions the host links into module "wasmext"
//! (SPEC section 1.2), declared exactly as the ABI defines them. Everything
//! here is unchecked; plugins normally use the safe wrappers in wasmext.zig.

/// Every host service. `ptr`/`len` point at one MessagePack request map owned
/// by the guest. The result is a packed buffer `(ptr << 32) | len` holding the
/// answer map in a region the host got from `wasmext_alloc`, now owned by the
/// guest; `0` means the host could not deliver an answer.
pub extern "wasmext" fn host_call(ptr: [*]const u8, len: u32) i64;

/// Cheap direct log of UTF-8 text at `level` (0 trace .. 4 error). The host
/// copies the text before it returns.
pub extern "wasmext" fn log(level: i32, ptr: [*]const u8, len: u32) void;

/// Splits a packed buffer into its pointer and length halves.
pub fn unpack(buffer: i64) struct { ptr: u32, len: u32 } {
    const bits: u64 = @bitCast(buffer);
    return .{ .ptr = @truncate(bits >> 32), .len = @truncate(bits) };
}

/// Packs a guest region for the host; both halves are unsigned 32-bit.
pub fn pack(ptr: u32, len: u32) i64 {
    return @bitCast((@as(u64, ptr) << 32) | len);
}
