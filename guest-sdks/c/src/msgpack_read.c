/* MessagePack reader. Pure C11, no imports, so the native unit tests build it
 * unchanged. The input is untrusted: every length is checked against the
 * bytes that are left before anything is touched, and container nesting is
 * tracked with a fixed-size stack rather than recursion, so a hostile buffer
 * can neither read out of bounds nor exhaust the (small) wasm stack. */
#include <string.h>

#include "wasmext.h"

void wasmext_reader_init(wasmext_reader *r, const void *buf, size_t len) {
    r->buf = (const uint8_t *)buf;
    r->len = buf ? len : 0;
    r->pos = 0;
}

bool wasmext_reader_at_end(const wasmext_reader *r) {
    return r->pos >= r->len;
}

static uint64_t load_be(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* Two's-complement reinterpretation of a `bytes`-wide big-endian integer,
 * written so that no conversion is implementation-defined. */
static int64_t as_signed(uint64_t v, size_t bytes) {
    uint64_t mask = bytes == 8 ? UINT64_MAX : (((uint64_t)1 << (bytes * 8)) - 1);
    uint64_t sign = (uint64_t)1 << (bytes * 8 - 1);
    if (!(v & sign)) return (int64_t)v;
    return -(int64_t)(~v & mask) - 1; /* v - 2^(8*bytes) */
}

static double f32_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return (double)f;
}

static double f64_bits(uint64_t bits) {
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static void set_uint(wasmext_value *v, uint64_t u) {
    if (u > (uint64_t)INT64_MAX) {
        v->type = WASMEXT_TYPE_UINT;
        v->as.u = u;
    } else {
        v->type = WASMEXT_TYPE_INT;
        v->as.i = (int64_t)u;
    }
}

/* Decode the token at r->pos into *v; *size = header + payload bytes. */
static int decode(const wasmext_reader *r, wasmext_value *v, size_t *size) {
    if (r->pos >= r->len) return WASMEXT_ERR_TRUNCATED;
    const uint8_t *p = r->buf + r->pos;
    size_t left = r->len - r->pos - 1; /* bytes after the type byte */
    uint8_t b = p[0];
    size_t hdr = 1;       /* type byte plus length/number bytes */
    uint64_t n = 0;       /* payload length (str/bin) or item count */
    size_t width = 0;     /* width of the length/number that follows */

    if (b <= 0x7f) { set_uint(v, b); *size = 1; return WASMEXT_OK; }
    if (b >= 0xe0) { v->type = WASMEXT_TYPE_INT; v->as.i = (int64_t)b - 256; *size = 1; return WASMEXT_OK; }
    if (b >= 0x80 && b <= 0x8f) { v->type = WASMEXT_TYPE_MAP; n = b & 0x0f; goto container; }
    if (b >= 0x90 && b <= 0x9f) { v->type = WASMEXT_TYPE_ARRAY; n = b & 0x0f; goto container; }
    if (b >= 0xa0 && b <= 0xbf) { v->type = WASMEXT_TYPE_STR; n = b & 0x1f; goto payload; }

    switch (b) {
    case 0xc0: v->type = WASMEXT_TYPE_NIL; *size = 1; return WASMEXT_OK;
    case 0xc2: case 0xc3:
        v->type = WASMEXT_TYPE_BOOL; v->as.b = b == 0xc3; *size = 1; return WASMEXT_OK;
    case 0xc4: case 0xc5: case 0xc6: width = (size_t)1 << (b - 0xc4); v->type = WASMEXT_TYPE_BIN; break;
    case 0xd9: case 0xda: case 0xdb: width = (size_t)1 << (b - 0xd9); v->type = WASMEXT_TYPE_STR; break;
    case 0xdc: case 0xdd: width = (size_t)2 << (b - 0xdc); v->type = WASMEXT_TYPE_ARRAY; break;
    case 0xde: case 0xdf: width = (size_t)2 << (b - 0xde); v->type = WASMEXT_TYPE_MAP; break;
    case 0xca: case 0xcb: case 0xcc: case 0xcd: case 0xce: case 0xcf:
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        static const uint8_t widths[] = {4, 8, 1, 2, 4, 8, 1, 2, 4, 8};
        width = widths[b - 0xca];
        if (left < width) return WASMEXT_ERR_TRUNCATED;
        uint64_t raw = load_be(p + 1, width);
        if (b == 0xca) { v->type = WASMEXT_TYPE_FLOAT; v->as.f = f32_bits((uint32_t)raw); }
        else if (b == 0xcb) { v->type = WASMEXT_TYPE_FLOAT; v->as.f = f64_bits(raw); }
        else if (b <= 0xcf) set_uint(v, raw);
        else { v->type = WASMEXT_TYPE_INT; v->as.i = as_signed(raw, width); }
        *size = 1 + width;
        return WASMEXT_OK;
    }
    default: /* 0xc1 (never used) and the ext family, which the ABI excludes */
        return WASMEXT_ERR_MALFORMED;
    }
    if (left < width) return WASMEXT_ERR_TRUNCATED;
    n = load_be(p + 1, width);
    hdr += width;
    left -= width;
    if (v->type == WASMEXT_TYPE_ARRAY || v->type == WASMEXT_TYPE_MAP) goto container;

payload:
    if (n > left) return WASMEXT_ERR_TRUNCATED;
    if (v->type == WASMEXT_TYPE_STR) { v->as.str.ptr = (const char *)p + hdr; v->as.str.len = (uint32_t)n; }
    else { v->as.bin.ptr = p + hdr; v->as.bin.len = (uint32_t)n; }
    *size = hdr + (size_t)n;
    return WASMEXT_OK;

container:
    /* Every item takes at least one byte, so a count beyond the bytes left
     * is a lie; refusing it here keeps 4-billion-item headers cheap. */
    if (n > left || (v->type == WASMEXT_TYPE_MAP && n * 2 > left)) return WASMEXT_ERR_TRUNCATED;
    v->as.count = (uint32_t)n;
    *size = hdr;
    return WASMEXT_OK;
}

int wasmext_peek(const wasmext_reader *r, wasmext_value *out) {
    size_t size;
    return decode(r, out, &size);
}

int wasmext_read(wasmext_reader *r, wasmext_value *out) {
    size_t size;
    int rc = decode(r, out, &size);
    if (rc == WASMEXT_OK) r->pos += size;
    return rc;
}

/* Read one token and insist on its type; the cursor only moves on success. */
static int read_typed(wasmext_reader *r, wasmext_type want, wasmext_value *v) {
    size_t size;
    int rc = decode(r, v, &size);
    if (rc != WASMEXT_OK) return rc;
    if (v->type != want) return WASMEXT_ERR_TYPE;
    r->pos += size;
    return WASMEXT_OK;
}

int wasmext_read_nil(wasmext_reader *r) {
    wasmext_value v;
    return read_typed(r, WASMEXT_TYPE_NIL, &v);
}

int wasmext_read_bool(wasmext_reader *r, bool *out) {
    wasmext_value v;
    int rc = read_typed(r, WASMEXT_TYPE_BOOL, &v);
    if (rc == WASMEXT_OK) *out = v.as.b;
    return rc;
}

int wasmext_read_int(wasmext_reader *r, int64_t *out) {
    wasmext_value v;
    size_t size;
    int rc = decode(r, &v, &size);
    if (rc != WASMEXT_OK) return rc;
    if (v.type == WASMEXT_TYPE_UINT) return WASMEXT_ERR_RANGE;
    if (v.type != WASMEXT_TYPE_INT) return WASMEXT_ERR_TYPE;
    *out = v.as.i;
    r->pos += size;
    return WASMEXT_OK;
}

int wasmext_read_uint(wasmext_reader *r, uint64_t *out) {
    wasmext_value v;
    size_t size;
    int rc = decode(r, &v, &size);
    if (rc != WASMEXT_OK) return rc;
    if (v.type == WASMEXT_TYPE_INT && v.as.i < 0) return WASMEXT_ERR_RANGE;
    if (v.type == WASMEXT_TYPE_INT) *out = (uint64_t)v.as.i;
    else if (v.type == WASMEXT_TYPE_UINT) *out = v.as.u;
    else return WASMEXT_ERR_TYPE;
    r->pos += size;
    return WASMEXT_OK;
}

int wasmext_read_double(wasmext_reader *r, double *out) {
    wasmext_value v;
    size_t size;
    int rc = decode(r, &v, &size);
    if (rc != WASMEXT_OK) return rc;
    if (v.type == WASMEXT_TYPE_FLOAT) *out = v.as.f;
    else if (v.type == WASMEXT_TYPE_INT) *out = (double)v.as.i;
    else if (v.type == WASMEXT_TYPE_UINT) *out = (double)v.as.u;
    else return WASMEXT_ERR_TYPE;
    r->pos += size;
    return WASMEXT_OK;
}

int wasmext_read_str(wasmext_reader *r, const char **s, uint32_t *len) {
    wasmext_value v;
    int rc = read_typed(r, WASMEXT_TYPE_STR, &v);
    if (rc == WASMEXT_OK) { *s = v.as.str.ptr; *len = v.as.str.len; }
    return rc;
}

int wasmext_read_bin(wasmext_reader *r, const uint8_t **p, uint32_t *len) {
    wasmext_value v;
    int rc = read_typed(r, WASMEXT_TYPE_BIN, &v);
    if (rc == WASMEXT_OK) { *p = v.as.bin.ptr; *len = v.as.bin.len; }
    return rc;
}

int wasmext_read_array(wasmext_reader *r, uint32_t *count) {
    wasmext_value v;
    int rc = read_typed(r, WASMEXT_TYPE_ARRAY, &v);
    if (rc == WASMEXT_OK) *count = v.as.count;
    return rc;
}

int wasmext_read_map(wasmext_reader *r, uint32_t *count) {
    wasmext_value v;
    int rc = read_typed(r, WASMEXT_TYPE_MAP, &v);
    if (rc == WASMEXT_OK) *count = v.as.count;
    return rc;
}

bool wasmext_utf8_valid(const void *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        /* Text is mostly ASCII: test eight bytes per step (memcpy, because
         * p need not be aligned), which keeps a 1 MiB request cheap in fuel. */
        if (len - i >= 8) {
            uint64_t word;
            memcpy(&word, p + i, 8);
            if (!(word & UINT64_C(0x8080808080808080))) { i += 8; continue; }
        }
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        /* The well-formed byte sequences of Unicode table 3-7: the second
         * byte's range excludes overlong forms, surrogates and > U+10FFFF. */
        size_t left = len - i;
        uint8_t b1 = left > 1 ? p[i + 1] : 0;
        if ((b1 & 0xc0) != 0x80) return false;
        if (c < 0xe0) {
            if (c < 0xc2) return false; /* stray continuation or overlong lead */
            i += 2;
        } else if (c < 0xf0) {
            if (left < 3 || (p[i + 2] & 0xc0) != 0x80) return false;
            if ((c == 0xe0 && b1 < 0xa0) || (c == 0xed && b1 > 0x9f)) return false;
            i += 3;
        } else {
            if (c > 0xf4 || left < 4 || (p[i + 2] & 0xc0) != 0x80 || (p[i + 3] & 0xc0) != 0x80)
                return false;
            if ((c == 0xf0 && b1 < 0x90) || (c == 0xf4 && b1 > 0x8f)) return false;
            i += 4;
        }
    }
    return true;
}

enum { CHECK_KEYS = 1, CHECK_UTF8 = 2 };

/* Walk one complete value. Bounds and depth are always checked; `checks`
 * adds what a whole document needs (string map keys, UTF-8 strings). */
static int walk(wasmext_reader *r, unsigned checks) {
    uint64_t left[WASMEXT_MAX_DEPTH]; /* items still due per open container (maps count 2 per pair) */
    bool is_map[WASMEXT_MAX_DEPTH];
    int depth = 0;
    size_t start = r->pos;
    for (;;) {
        bool want_key = depth > 0 && is_map[depth - 1] && left[depth - 1] % 2 == 0;
        wasmext_value v;
        int rc = wasmext_read(r, &v);
        if (rc == WASMEXT_OK && (checks & CHECK_KEYS) && want_key && v.type != WASMEXT_TYPE_STR)
            rc = WASMEXT_ERR_MALFORMED;
        if (rc == WASMEXT_OK && (checks & CHECK_UTF8) && v.type == WASMEXT_TYPE_STR &&
            !wasmext_utf8_valid(v.as.str.ptr, v.as.str.len))
            rc = WASMEXT_ERR_MALFORMED;
        if (rc == WASMEXT_OK && depth > 0) left[depth - 1]--;
        if (rc == WASMEXT_OK && (v.type == WASMEXT_TYPE_ARRAY || v.type == WASMEXT_TYPE_MAP)) {
            if (depth == WASMEXT_MAX_DEPTH) rc = WASMEXT_ERR_DEPTH;
            else if (v.as.count > 0) {
                is_map[depth] = v.type == WASMEXT_TYPE_MAP;
                left[depth] = (uint64_t)v.as.count * (is_map[depth] ? 2 : 1);
                depth++;
            }
        }
        if (rc != WASMEXT_OK) { r->pos = start; return rc; }
        while (depth > 0 && left[depth - 1] == 0) depth--;
        if (depth == 0) return WASMEXT_OK;
    }
}

int wasmext_skip(wasmext_reader *r) {
    return walk(r, 0);
}

int wasmext_read_raw(wasmext_reader *r, const uint8_t **p, size_t *len) {
    size_t start = r->pos;
    int rc = walk(r, 0);
    if (rc == WASMEXT_OK) { *p = r->buf + start; *len = r->pos - start; }
    return rc;
}

static int validate(const void *buf, size_t len, unsigned checks) {
    wasmext_reader r;
    wasmext_reader_init(&r, buf, len);
    int rc = walk(&r, checks);
    if (rc == WASMEXT_OK && r.pos != r.len) rc = WASMEXT_ERR_MALFORMED;
    return rc;
}

int wasmext_validate(const void *buf, size_t len) {
    return validate(buf, len, CHECK_KEYS);
}

int wasmext_validate_utf8(const void *buf, size_t len) {
    return validate(buf, len, CHECK_KEYS | CHECK_UTF8);
}

bool wasmext_str_eq(const char *s, size_t len, const char *cstr) {
    size_t n = strlen(cstr);
    return n == len && (n == 0 || memcmp(s, cstr, n) == 0);
}

int wasmext_map_find(const wasmext_reader *r, const char *key, wasmext_reader *value) {
    wasmext_reader cur = *r;
    uint32_t pairs;
    int rc = wasmext_read_map(&cur, &pairs);
    if (rc != WASMEXT_OK) return rc;
    for (uint32_t i = 0; i < pairs; i++) {
        const char *k;
        uint32_t klen;
        rc = wasmext_read_str(&cur, &k, &klen);
        if (rc == WASMEXT_ERR_TYPE) rc = wasmext_skip(&cur); /* non-string keys never match */
        else if (rc == WASMEXT_OK && wasmext_str_eq(k, klen, key)) {
            *value = cur;
            return WASMEXT_OK;
        }
        if (rc != WASMEXT_OK) return rc;
        rc = wasmext_skip(&cur);
        if (rc != WASMEXT_OK) return rc;
    }
    return WASMEXT_ERR_NOT_FOUND;
}
