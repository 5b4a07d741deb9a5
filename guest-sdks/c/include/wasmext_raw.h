/* wasmext C SDK, raw layer: the ABI v1 imports and export names, nothing else.
 *
 * Use this header directly only to write your own plugin runtime; normal
 * plugins include <wasmext.h>, whose src/plugin.c already defines every
 * export. The signatures follow abi/SPEC.md sections 1.1 and 1.2: pointers
 * and lengths are i32, buffers crossing the boundary are a packed i64
 * (ptr << 32 | len, 0 = nothing).
 */
#ifndef WASMEXT_RAW_H
#define WASMEXT_RAW_H

#include <stdint.h>

#include "wasmext_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Export names, exactly as the host looks them up. */
#define WASMEXT_EXPORT_ABI_VERSION "wasmext_abi_version"
#define WASMEXT_EXPORT_ALLOC "wasmext_alloc"
#define WASMEXT_EXPORT_FREE "wasmext_free"
#define WASMEXT_EXPORT_REGISTER "wasmext_register"
#define WASMEXT_EXPORT_CALL "wasmext_call"

/* Both ABI imports live in this module. */
#define WASMEXT_IMPORT_MODULE "wasmext"

#if defined(__wasm__)
#define WASMEXT_IMPORT(name) \
    __attribute__((import_module(WASMEXT_IMPORT_MODULE), import_name(name)))
#define WASMEXT_EXPORT(name) __attribute__((export_name(name)))
#else
/* Native builds (the SDK's unit tests) compile the headers but never link
 * the imports, so the attributes are dropped there. */
#define WASMEXT_IMPORT(name)
#define WASMEXT_EXPORT(name)
#endif

/* Every host service. The request (a MessagePack map with a string "op")
 * stays owned by the guest. The answer is written into a region the host got
 * from wasmext_alloc during this call; it belongs to the guest afterwards,
 * which must free() it; or, from a minor-3 host, into the answer area below
 * when it fits (the returned ptr is then the area's, not to be freed).
 * Returns the packed answer, 0 if none was delivered. */
WASMEXT_IMPORT("host_call")
uint64_t wasmext_raw_host_call(const uint8_t *request, uint32_t len);

/* The guest's area for host_call answers (ABI minor 3, SPEC 1.4), packed as
 * (ptr, size); src/host.c defines it and src/plugin.c declares it in the
 * registration map when the host speaks minor 3. An answer the host wrote
 * there is overwritten by the next host call: copy it out before then. */
uint64_t wasmext_answer_area(void);
#ifndef WASMEXT_ANSWER_AREA_SIZE
#define WASMEXT_ANSWER_AREA_SIZE 1024
#endif

/* Cheap direct log of UTF-8 text at a WASMEXT_LOG_* level; the host copies
 * the text before it returns. */
WASMEXT_IMPORT("log")
void wasmext_raw_log(int32_t level, const uint8_t *text, uint32_t len);

/* The exports. src/plugin.c defines them; a runtime of your own built on this
 * header alone would define these instead. The C names carry an export_
 * prefix because `wasmext_call` is the handler-context type of wasmext.h. */
WASMEXT_EXPORT(WASMEXT_EXPORT_ABI_VERSION) int32_t wasmext_export_abi_version(void);
/* malloc'd, 8-aligned, NULL (0) on failure; the host writes requests here. */
WASMEXT_EXPORT(WASMEXT_EXPORT_ALLOC) void *wasmext_export_alloc(uint32_t size);
WASMEXT_EXPORT(WASMEXT_EXPORT_FREE) void wasmext_export_free(void *ptr, uint32_t size);
WASMEXT_EXPORT(WASMEXT_EXPORT_REGISTER)
uint64_t wasmext_export_register(const uint8_t *request, uint32_t len);
WASMEXT_EXPORT(WASMEXT_EXPORT_CALL)
uint64_t wasmext_export_call(const uint8_t *request, uint32_t len);

/* Pack / unpack the i64 buffer handle of SPEC section 1.3. The pointer is a
 * 32-bit linear-memory address on wasm32. */
static inline uint64_t wasmext_pack(const void *ptr, uint32_t len) {
    return ((uint64_t)(uint32_t)(uintptr_t)ptr << 32) | (uint64_t)len;
}

static inline uint32_t wasmext_packed_ptr(uint64_t packed) {
    return (uint32_t)(packed >> 32);
}

static inline uint32_t wasmext_packed_len(uint64_t packed) {
    return (uint32_t)(packed & 0xffffffffu);
}

#ifdef __cplusplus
}
#endif

#endif /* WASMEXT_RAW_H */
