/* MessagePack writer into one growable buffer. Pure C11, no imports, so the
 * native unit tests build it unchanged. Every encoding is the smallest one,
 * because the conformance vectors compare bytes, not values. */
#include <stdlib.h>
#include <string.h>

#include "wasmext.h"

void wasmext_writer_reset(wasmext_writer *w) {
    w->len = 0;
    w->err = WASMEXT_OK;
}

void wasmext_writer_free(wasmext_writer *w) {
    free(w->buf);
    w->buf = NULL;
    w->len = 0;
    w->cap = 0;
    w->err = WASMEXT_OK;
}

int wasmext_writer_error(const wasmext_writer *w) {
    return w->err;
}

/* Make room for n more bytes; on failure record the error once and refuse. */
static bool reserve(wasmext_writer *w, size_t n) {
    if (w->err != WASMEXT_OK) return false;
    if (n > SIZE_MAX - w->len) { w->err = WASMEXT_ERR_NOMEM; return false; }
    size_t need = w->len + n;
    if (need <= w->cap) return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *grown = (uint8_t *)realloc(w->buf, cap);
    if (!grown) { w->err = WASMEXT_ERR_NOMEM; return false; }
    w->buf = grown;
    w->cap = cap;
    return true;
}

static void put(wasmext_writer *w, const void *p, size_t n) {
    if (n == 0 || !reserve(w, n)) return;
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

/* Type byte followed by `width` big-endian bytes of v. */
static void put_be(wasmext_writer *w, uint8_t type, uint64_t v, size_t width) {
    uint8_t tmp[9];
    tmp[0] = type;
    for (size_t i = 0; i < width; i++) tmp[width - i] = (uint8_t)(v >> (8 * i));
    put(w, tmp, width + 1);
}

void wasmext_write_raw(wasmext_writer *w, const void *p, size_t len) {
    put(w, p, len);
}

void wasmext_write_nil(wasmext_writer *w) {
    put_be(w, 0xc0, 0, 0);
}

void wasmext_write_bool(wasmext_writer *w, bool v) {
    put_be(w, v ? 0xc3 : 0xc2, 0, 0);
}

void wasmext_write_uint(wasmext_writer *w, uint64_t v) {
    if (v <= 0x7f) put_be(w, (uint8_t)v, 0, 0);
    else if (v <= UINT8_MAX) put_be(w, 0xcc, v, 1);
    else if (v <= UINT16_MAX) put_be(w, 0xcd, v, 2);
    else if (v <= UINT32_MAX) put_be(w, 0xce, v, 4);
    else put_be(w, 0xcf, v, 8);
}

void wasmext_write_int(wasmext_writer *w, int64_t v) {
    /* Non-negative values take the unsigned forms, as every mainstream
     * encoder (and the vectors) do. */
    if (v >= 0) { wasmext_write_uint(w, (uint64_t)v); return; }
    if (v >= -32) put_be(w, (uint8_t)(0xe0 | (uint8_t)(v + 32)), 0, 0);
    else if (v >= INT8_MIN) put_be(w, 0xd0, (uint64_t)v, 1);
    else if (v >= INT16_MIN) put_be(w, 0xd1, (uint64_t)v, 2);
    else if (v >= INT32_MIN) put_be(w, 0xd2, (uint64_t)v, 4);
    else put_be(w, 0xd3, (uint64_t)v, 8);
}

void wasmext_write_double(wasmext_writer *w, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_be(w, 0xcb, bits, 8);
}

/* Header of a str/bin/array/map: fix form when `fix_max` allows, then the
 * 8/16/32-bit forms starting at type byte `base` (base8 = 0 when absent). */
static void put_header(wasmext_writer *w, uint8_t fix, size_t fix_max, uint8_t base8,
                       uint8_t base16, uint8_t base32, size_t n) {
    if (w->err != WASMEXT_OK) return;
    if ((uint64_t)n > UINT32_MAX) { w->err = WASMEXT_ERR_RANGE; return; }
    if (fix && n <= fix_max) put_be(w, (uint8_t)(fix | n), 0, 0);
    else if (base8 && n <= UINT8_MAX) put_be(w, base8, n, 1);
    else if (n <= UINT16_MAX) put_be(w, base16, n, 2);
    else put_be(w, base32, n, 4);
}

void wasmext_write_str(wasmext_writer *w, const char *s, size_t len) {
    put_header(w, 0xa0, 31, 0xd9, 0xda, 0xdb, len);
    put(w, s, len);
}

void wasmext_write_cstr(wasmext_writer *w, const char *s) {
    wasmext_write_str(w, s, strlen(s));
}

void wasmext_write_bin(wasmext_writer *w, const void *p, size_t len) {
    put_header(w, 0, 0, 0xc4, 0xc5, 0xc6, len);
    put(w, p, len);
}

void wasmext_write_array(wasmext_writer *w, uint32_t count) {
    put_header(w, 0x90, 15, 0, 0xdc, 0xdd, count);
}

void wasmext_write_map(wasmext_writer *w, uint32_t count) {
    put_header(w, 0x80, 15, 0, 0xde, 0xdf, count);
}

static int copy_at(wasmext_reader *r, wasmext_writer *w, int depth) {
    wasmext_value v;
    int rc = wasmext_read(r, &v);
    if (rc != WASMEXT_OK) return rc;
    if (depth > WASMEXT_MAX_DEPTH) return WASMEXT_ERR_DEPTH;
    uint64_t items = 0;
    switch (v.type) {
    case WASMEXT_TYPE_NIL: wasmext_write_nil(w); break;
    case WASMEXT_TYPE_BOOL: wasmext_write_bool(w, v.as.b); break;
    case WASMEXT_TYPE_INT: wasmext_write_int(w, v.as.i); break;
    case WASMEXT_TYPE_UINT: wasmext_write_uint(w, v.as.u); break;
    case WASMEXT_TYPE_FLOAT: wasmext_write_double(w, v.as.f); break;
    case WASMEXT_TYPE_STR: wasmext_write_str(w, v.as.str.ptr, v.as.str.len); break;
    case WASMEXT_TYPE_BIN: wasmext_write_bin(w, v.as.bin.ptr, v.as.bin.len); break;
    case WASMEXT_TYPE_ARRAY: wasmext_write_array(w, v.as.count); items = v.as.count; break;
    case WASMEXT_TYPE_MAP: wasmext_write_map(w, v.as.count); items = 2 * (uint64_t)v.as.count; break;
    }
    for (uint64_t i = 0; i < items && rc == WASMEXT_OK; i++) rc = copy_at(r, w, depth + 1);
    return rc != WASMEXT_OK ? rc : wasmext_writer_error(w);
}

int wasmext_copy_value(wasmext_reader *r, wasmext_writer *w) { return copy_at(r, w, 0); }
