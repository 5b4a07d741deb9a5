/* Host services over the two ABI imports: host_call answers decoded into a
 * wasmext_answer, config/secret wrappers, direct logging. */
#include <stdlib.h>
#include <string.h>

#include "wasmext.h"

/* A reader on this stands in for an absent "value". */
static const uint8_t k_nil[1] = {0xc0};

/* ABI minor 3 (SPEC 1.4): the area the registration map declares as
 * "answer_region". The host writes an answer that fits here instead of
 * entering wasmext_alloc (a second guest entry per host call);
 * wasmext_host_call copies it out at once, so every wasmext_answer still owns
 * a malloc'd buffer of its own and outlives the host calls after it. */
static _Alignas(8) uint8_t g_answer_area[WASMEXT_ANSWER_AREA_SIZE];

uint64_t wasmext_answer_area(void) {
    return wasmext_pack(g_answer_area, (uint32_t)sizeof g_answer_area);
}

/* Requests stay guest-owned (SPEC 1.4) and the host copies them before it
 * returns, so one buffer serves every request of the instance. */
static wasmext_writer g_request = WASMEXT_WRITER_INIT;

static void answer_init(wasmext_answer *a) {
    memset(a, 0, sizeof *a);
    wasmext_reader_init(&a->value, k_nil, sizeof k_nil);
    a->message = "";
}

/* An error produced on the guest side (no usable answer from the host). */
static int local_error(wasmext_answer *a, const char *code, const char *message) {
    a->ok = false;
    a->code = code;
    a->code_len = (uint32_t)strlen(code);
    a->message = message;
    a->message_len = (uint32_t)strlen(message);
    return WASMEXT_ERR_HOST;
}

/* Fill a->ok/value/code/message from the validated answer map in a->buf. */
static int parse_answer(wasmext_answer *a) {
    wasmext_reader doc, field;
    wasmext_reader_init(&doc, a->buf, a->buf_len);
    if (wasmext_validate(a->buf, a->buf_len) != WASMEXT_OK ||
        wasmext_map_find(&doc, "ok", &field) != WASMEXT_OK ||
        wasmext_read_bool(&field, &a->ok) != WASMEXT_OK)
        return local_error(a, WASMEXT_E_INTERNAL, "malformed host_call answer");
    if (a->ok) {
        if (wasmext_map_find(&doc, "value", &field) == WASMEXT_OK) a->value = field;
        return WASMEXT_OK;
    }
    wasmext_reader err, s;
    if (wasmext_map_find(&doc, "error", &err) != WASMEXT_OK ||
        wasmext_map_find(&err, "code", &s) != WASMEXT_OK ||
        wasmext_read_str(&s, &a->code, &a->code_len) != WASMEXT_OK)
        return local_error(a, WASMEXT_E_INTERNAL, "host_call answer without error.code");
    if (wasmext_map_find(&err, "message", &s) == WASMEXT_OK)
        (void)wasmext_read_str(&s, &a->message, &a->message_len); /* optional */
    return WASMEXT_ERR_HOST;
}

int wasmext_host_call(const void *request, size_t len, wasmext_answer *out) {
    answer_init(out);
    if ((uint64_t)len > UINT32_MAX)
        return local_error(out, WASMEXT_E_LIMIT, "host_call request too large");
    uint64_t packed = wasmext_raw_host_call((const uint8_t *)request, (uint32_t)len);
    if (packed == 0) /* the host's wasmext_alloc failed: SPEC 4.2 says internal */
        return local_error(out, WASMEXT_E_INTERNAL, "host_call delivered no answer");
    uint8_t *at = (uint8_t *)(uintptr_t)wasmext_packed_ptr(packed);
    uint32_t at_len = wasmext_packed_len(packed);
    if (at == g_answer_area) {
        if (at_len > sizeof g_answer_area) /* the host never does this */
            return local_error(out, WASMEXT_E_INTERNAL, "malformed host_call answer");
        uint8_t *copy = malloc(at_len ? at_len : 1);
        if (!copy) return local_error(out, WASMEXT_E_LIMIT, "out of memory for a host_call answer");
        memcpy(copy, g_answer_area, at_len);
        at = copy;
    }
    out->buf = at;
    out->buf_len = at_len;
    return parse_answer(out);
}

void wasmext_answer_free(wasmext_answer *a) {
    /* The host allocated the region through our wasmext_alloc, i.e. malloc, or
     * wrote the answer into the answer area and wasmext_host_call malloc'd a copy. */
    free(a->buf);
    answer_init(a);
}

bool wasmext_answer_is(const wasmext_answer *a, const char *code) {
    return !a->ok && a->code && wasmext_str_eq(a->code, a->code_len, code);
}

/* {"op": op} or {"op": op, "key": key}. */
static int key_op(const char *op, const char *key, wasmext_answer *out) {
    wasmext_writer *w = &g_request;
    wasmext_writer_reset(w);
    wasmext_write_map(w, key ? 2 : 1);
    wasmext_write_cstr(w, "op");
    wasmext_write_cstr(w, op);
    if (key) {
        wasmext_write_cstr(w, "key");
        wasmext_write_cstr(w, key);
    }
    if (wasmext_writer_error(w) != WASMEXT_OK) {
        answer_init(out);
        return local_error(out, WASMEXT_E_LIMIT, "out of memory building a host_call request");
    }
    return wasmext_host_call(w->buf, w->len, out);
}

/* Both ops are `since` minor 0, so no wrapper here needs the host-minor
 * check of SPEC 3.1 yet; later ops must answer unsupported locally when
 * since > wasmext_host_abi_minor(). */
int wasmext_config_get(const char *key, wasmext_answer *out) {
    return key_op(WASMEXT_OP_CONFIG_GET, key, out);
}

int wasmext_secret_get(const char *key, wasmext_answer *out) {
    if (!key) {
        answer_init(out);
        return local_error(out, WASMEXT_E_INVALID, "secret.get needs a key");
    }
    return key_op(WASMEXT_OP_SECRET_GET, key, out);
}

void wasmext_log_n(int level, const char *text, size_t len) {
    /* The host cuts lines at max_log_line_bytes anyway; clamping here only
     * keeps the length inside the import's u32. */
    if ((uint64_t)len > UINT32_MAX) len = UINT32_MAX;
    wasmext_raw_log(level, (const uint8_t *)text, (uint32_t)len);
}

void wasmext_log(int level, const char *text) {
    wasmext_log_n(level, text, strlen(text));
}
