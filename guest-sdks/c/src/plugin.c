/* The ABI exports: memory hand-over, registration, and hook dispatch to the
 * table the plugin defines with WASMEXT_PLUGIN(...). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "wasmext.h"

/* SPEC 1.1 wants wasmext_alloc regions aligned to 8; malloc gives
 * max_align_t alignment, which must therefore be at least that. */
_Static_assert(_Alignof(max_align_t) >= 8, "malloc alignment below the ABI's 8");

static const uint8_t k_nil[1] = {0xc0};

/* The one output buffer (SPEC 1.4): the host copies a response before it
 * enters the guest again, so every entry may reuse it. */
static wasmext_writer g_out = WASMEXT_WRITER_INIT;

/* Answered when even the error response cannot be allocated. */
static const uint8_t k_oom[] = {
    0x82, 0xa2, 'o', 'k', 0xc2, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x82,
    0xa4, 'c', 'o', 'd', 'e', 0xa5, 'l', 'i', 'm', 'i', 't',
    0xa7, 'm', 'e', 's', 's', 'a', 'g', 'e',
    0xad, 'o', 'u', 't', ' ', 'o', 'f', ' ', 'm', 'e', 'm', 'o', 'r', 'y'};

/* {"ok":true,"value": — the prefix of every answer that carries a value.
 * The handler writes its value right after it, so nothing is copied; a STOP
 * verdict turns the 2 into a 3 and appends "stop": true. */
static const uint8_t k_value_prefix[] = {0x82, 0xa2, 'o', 'k', 0xc3,
                                         0xa5, 'v', 'a', 'l', 'u', 'e'};
static const uint8_t k_ok_only[] = {0x81, 0xa2, 'o', 'k', 0xc3};
static const uint8_t k_stop_tail[] = {0xa4, 's', 't', 'o', 'p', 0xc3};

static int g_host_minor;
static char g_plugin_id[65]; /* manifest ids are at most 64 characters */

int wasmext_host_abi_minor(void) { return g_host_minor; }
const char *wasmext_plugin_id(void) { return g_plugin_id; }

WASMEXT_EXPORT(WASMEXT_EXPORT_ABI_VERSION)
int32_t wasmext_export_abi_version(void) {
    return WASMEXT_ABI_MAJOR;
}

WASMEXT_EXPORT(WASMEXT_EXPORT_ALLOC)
void *wasmext_export_alloc(uint32_t size) {
    /* malloc(0) may legally return NULL, which the host would read as
     * failure; an empty input still deserves a region. */
    return malloc(size ? size : 1);
}

WASMEXT_EXPORT(WASMEXT_EXPORT_FREE)
void wasmext_export_free(void *ptr, uint32_t size) {
    (void)size; /* malloc tracks sizes itself */
    free(ptr);
}

static uint64_t finish(void) {
    if (wasmext_writer_error(&g_out) != WASMEXT_OK)
        return wasmext_pack(k_oom, (uint32_t)sizeof k_oom);
    return wasmext_pack(g_out.buf, (uint32_t)g_out.len);
}

/* Remember what later calls may need from the registration request. A bad
 * request only loses this information: registering must still succeed. */
static void note_request(const uint8_t *ptr, uint32_t len) {
    wasmext_reader doc, sub, field;
    if (wasmext_validate(ptr, len) != WASMEXT_OK) return;
    wasmext_reader_init(&doc, ptr, len);
    int64_t minor;
    if (wasmext_map_find(&doc, "abi", &sub) == WASMEXT_OK &&
        wasmext_map_find(&sub, "minor", &field) == WASMEXT_OK &&
        wasmext_read_int(&field, &minor) == WASMEXT_OK && minor >= 0 && minor <= 0xffff)
        g_host_minor = (int)minor;
    const char *id;
    uint32_t id_len;
    if (wasmext_map_find(&doc, "plugin", &sub) == WASMEXT_OK &&
        wasmext_map_find(&sub, "id", &field) == WASMEXT_OK &&
        wasmext_read_str(&field, &id, &id_len) == WASMEXT_OK) {
        if (id_len >= sizeof g_plugin_id) id_len = sizeof g_plugin_id - 1;
        memcpy(g_plugin_id, id, id_len);
        g_plugin_id[id_len] = '\0';
    }
}

/* Are the n bytes register_extra wrote exactly n key/value pairs with string
 * keys, none of them a key the SDK writes itself? A mistake there would make
 * the host refuse the whole registration map with a bare InvalidOutput. */
static bool extra_entries_valid(const wasmext_writer *extra, uint32_t n) {
    static const char *const own[] = {"abi_minor", "name", "version", "hooks", "shareable",
                                      WASMEXT_REG_ANSWER_REGION};
    wasmext_writer doc = WASMEXT_WRITER_INIT;
    wasmext_write_map(&doc, n);
    wasmext_write_raw(&doc, extra->buf, extra->len);
    bool ok = wasmext_writer_error(&doc) == WASMEXT_OK &&
              wasmext_validate(doc.buf, doc.len) == WASMEXT_OK;
    wasmext_reader r;
    wasmext_reader_init(&r, doc.buf, doc.len);
    if (ok) (void)wasmext_read_map(&r, &n);
    for (uint32_t i = 0; ok && i < n; i++) {
        const char *key;
        uint32_t key_len;
        ok = wasmext_read_str(&r, &key, &key_len) == WASMEXT_OK && wasmext_skip(&r) == WASMEXT_OK;
        for (size_t k = 0; ok && k < sizeof own / sizeof own[0]; k++)
            ok = !wasmext_str_eq(key, key_len, own[k]);
    }
    wasmext_writer_free(&doc);
    return ok;
}

WASMEXT_EXPORT(WASMEXT_EXPORT_REGISTER)
uint64_t wasmext_export_register(const uint8_t *ptr, uint32_t len) {
    const wasmext_plugin *p = &wasmext_plugin_definition;
    wasmext_writer *w = &g_out;
    note_request(ptr, len);
    wasmext_writer_reset(w);
    /* Extra entries go to their own buffer first: the map header needs the count. */
    wasmext_writer extra = WASMEXT_WRITER_INIT;
    uint32_t n_extra = p->register_extra ? p->register_extra(&extra) : 0;
    /* Broken extras are replaced by one entry saying why: the host keeps
     * unknown keys and `wasmext inspect` shows them, and no log import is
     * needed (plugins without extras import nothing for this). */
    const char *extra_error = NULL;
    if (wasmext_writer_error(&extra) != WASMEXT_OK)
        extra_error = "out of memory; extra entries dropped";
    else if (n_extra && !extra_entries_valid(&extra, n_extra))
        extra_error = "the bytes written are not the number of key/value pairs returned, or a "
                      "key is not a string or repeats abi_minor, name, version, hooks, "
                      "shareable or answer_region; "
                      "extra entries dropped";
    if (extra_error) {
        wasmext_writer_reset(&extra);
        wasmext_write_cstr(&extra, "register_extra_error");
        wasmext_write_cstr(&extra, extra_error);
        n_extra = wasmext_writer_error(&extra) == WASMEXT_OK ? 1 : 0;
    }
    /* Without extras the map is the static table above: the same for every copy
     * of this module, so the host may reuse it (abi/SPEC.md 3.2). */
    bool shareable = p->register_extra == NULL;
    /* An older host would keep the key as an unknown one; it is left out there. */
    bool area = g_host_minor >= WASMEXT_REG_ANSWER_REGION_SINCE;
    wasmext_write_map(w, 2 + (p->name != NULL) + (p->version != NULL) + shareable + area +
                             n_extra);
    wasmext_write_cstr(w, "abi_minor");
    wasmext_write_int(w, WASMEXT_ABI_MINOR);
    if (shareable) { wasmext_write_cstr(w, "shareable"); wasmext_write_bool(w, true); }
    if (area) {
        uint64_t region = wasmext_answer_area();
        wasmext_write_cstr(w, WASMEXT_REG_ANSWER_REGION);
        wasmext_write_map(w, 2);
        wasmext_write_cstr(w, "ptr");
        wasmext_write_uint(w, wasmext_packed_ptr(region));
        wasmext_write_cstr(w, "size");
        wasmext_write_uint(w, wasmext_packed_len(region));
    }
    if (p->name) { wasmext_write_cstr(w, "name"); wasmext_write_cstr(w, p->name); }
    if (p->version) { wasmext_write_cstr(w, "version"); wasmext_write_cstr(w, p->version); }
    wasmext_write_cstr(w, "hooks");
    wasmext_write_array(w, (uint32_t)p->hook_count);
    for (size_t i = 0; i < p->hook_count; i++) {
        const wasmext_hook *h = &p->hooks[i];
        bool prio = h->priority != WASMEXT_PRIORITY_DEFAULT;
        wasmext_write_map(w, 1 + prio + (h->pattern != NULL));
        wasmext_write_cstr(w, "hook");
        wasmext_write_cstr(w, h->name);
        if (prio) { wasmext_write_cstr(w, "priority"); wasmext_write_int(w, h->priority); }
        if (h->pattern) { wasmext_write_cstr(w, "pattern"); wasmext_write_cstr(w, h->pattern); }
    }
    if (n_extra) wasmext_write_raw(w, extra.buf, extra.len);
    wasmext_writer_free(&extra);
    return finish();
}

wasmext_verdict wasmext_fail_n(wasmext_call *call, const char *code, size_t code_len,
                               const char *message, size_t message_len) {
    wasmext_writer *w = call->out;
    wasmext_writer_reset(w);
    wasmext_write_map(w, 2);
    wasmext_write_cstr(w, "ok");
    wasmext_write_bool(w, false);
    wasmext_write_cstr(w, "error");
    wasmext_write_map(w, 2);
    wasmext_write_cstr(w, "code");
    wasmext_write_str(w, code, code_len);
    wasmext_write_cstr(w, "message");
    wasmext_write_str(w, message ? message : "", message ? message_len : 0);
    call->failed = true;
    /* Remember where the error ends, so whatever the handler writes after
     * failing cannot corrupt it (0: it could not be written). */
    call->out_start = wasmext_writer_error(w) == WASMEXT_OK ? w->len : 0;
    return WASMEXT_FAILED;
}

wasmext_verdict wasmext_fail(wasmext_call *call, const char *code, const char *message) {
    return wasmext_fail_n(call, code, strlen(code), message, message ? strlen(message) : 0);
}

wasmext_verdict wasmext_fail_answer(wasmext_call *call, const wasmext_answer *a) {
    if (a->ok || !a->code) return wasmext_fail(call, WASMEXT_E_INTERNAL, "host_call did not fail");
    return wasmext_fail_n(call, a->code, a->code_len, a->message, a->message_len);
}

int wasmext_data_str(const wasmext_call *call, const char **s, uint32_t *len) {
    wasmext_reader r = call->data;
    return wasmext_read_str(&r, s, len);
}

wasmext_verdict wasmext_return_str(wasmext_call *call, const char *s, size_t len) {
    wasmext_write_str(call->out, s, len);
    return WASMEXT_VALUE;
}

/* A pattern is an exact name or a prefix ending in '*' (docs/hooks.md). */
static bool pattern_matches(const char *pattern, const char *s, uint32_t len) {
    size_t plen = strlen(pattern);
    if (plen && pattern[plen - 1] == '*')
        return len >= plen - 1 && memcmp(s, pattern, plen - 1) == 0;
    return wasmext_str_eq(s, len, pattern);
}

/* The handler for this hook; for entries registered with a pattern, the one
 * whose pattern matches the data's subject ("tag" for on_tag, "name" for
 * output_extension), so one plugin can serve several tags or extensions.
 * The data is only looked at when a same-named entry has a pattern, so other
 * hooks pay nothing for this. */
static const wasmext_hook *find_hook(const char *name, uint32_t len, const wasmext_reader *data) {
    const wasmext_plugin *p = &wasmext_plugin_definition;
    const char *subject = NULL;
    uint32_t subject_len = 0;
    bool looked = false;
    for (size_t i = 0; i < p->hook_count; i++) {
        const wasmext_hook *h = &p->hooks[i];
        if (!wasmext_str_eq(name, len, h->name)) continue;
        if (h->pattern == NULL) return h;
        if (!looked) {
            wasmext_reader field;
            looked = true;
            if ((wasmext_map_find(data, "tag", &field) == WASMEXT_OK ||
                 wasmext_map_find(data, "name", &field) == WASMEXT_OK) &&
                wasmext_read_str(&field, &subject, &subject_len) != WASMEXT_OK)
                subject = NULL;
        }
        if (subject && pattern_matches(h->pattern, subject, subject_len)) return h;
    }
    return NULL;
}

/* Turn the handler's verdict into the response in g_out. */
static void respond(wasmext_call *call, wasmext_verdict verdict) {
    wasmext_writer *w = &g_out;
    if (call->failed) { /* wasmext_fail wrote the response */
        if (call->out_start) {
            w->len = call->out_start;
            w->err = WASMEXT_OK;
        }
        return;
    }
    if (wasmext_writer_error(w) != WASMEXT_OK) return; /* finish() answers k_oom */
    bool has_value = w->len > call->out_start;
    if (verdict == WASMEXT_UNCHANGED) {
        wasmext_writer_reset(w);
        wasmext_write_raw(w, k_ok_only, sizeof k_ok_only);
        return;
    }
    if (verdict != WASMEXT_VALUE && verdict != WASMEXT_STOP) {
        wasmext_fail(call, WASMEXT_E_FAILED, "handler failed without wasmext_fail()");
        return;
    }
    if (has_value && wasmext_validate(w->buf + call->out_start, w->len - call->out_start) != WASMEXT_OK) {
        /* Typically a count in write_array/write_map that the items do not match. */
        wasmext_fail(call, WASMEXT_E_FAILED, "handler wrote a malformed value (not exactly one value)");
        return;
    }
    if (verdict == WASMEXT_VALUE && !has_value) {
        wasmext_fail(call, WASMEXT_E_FAILED, "handler returned WASMEXT_VALUE but wrote no value");
        return;
    }
    if (verdict == WASMEXT_STOP) {
        if (!has_value) {
            wasmext_writer_reset(w);
            wasmext_write_raw(w, k_ok_only, sizeof k_ok_only);
        }
        w->buf[0]++; /* one more pair in the top-level fixmap */
        wasmext_write_raw(w, k_stop_tail, sizeof k_stop_tail);
    }
}

WASMEXT_EXPORT(WASMEXT_EXPORT_CALL)
uint64_t wasmext_export_call(const uint8_t *ptr, uint32_t len) {
    wasmext_call call;
    memset(&call, 0, sizeof call);
    call.out = &g_out;
    wasmext_writer_reset(&g_out);

    wasmext_reader doc, field;
    wasmext_reader_init(&doc, ptr, len);
    int rc = wasmext_validate(ptr, len);
    if (rc != WASMEXT_OK) {
        wasmext_fail(&call, WASMEXT_E_INVALID, rc == WASMEXT_ERR_DEPTH
                                                   ? "call request nests too deep"
                                                   : "call request is not valid MessagePack");
        return finish();
    }
    if (wasmext_map_find(&doc, "hook", &field) != WASMEXT_OK ||
        wasmext_read_str(&field, &call.hook, &call.hook_len) != WASMEXT_OK) {
        wasmext_fail(&call, WASMEXT_E_INVALID, "call request is not a map with a string \"hook\"");
        return finish();
    }
    wasmext_reader_init(&call.data, k_nil, sizeof k_nil);
    wasmext_reader_init(&call.meta, k_nil, sizeof k_nil);
    if (wasmext_map_find(&doc, "data", &field) == WASMEXT_OK) call.data = field;
    if (wasmext_map_find(&doc, "meta", &field) == WASMEXT_OK) call.meta = field;

    const wasmext_hook *hook = find_hook(call.hook, call.hook_len, &call.data);
    if (!hook) {
        static const char prefix[] = "no handler for hook '";
        wasmext_writer msg = WASMEXT_WRITER_INIT; /* scratch, freed below */
        wasmext_write_raw(&msg, prefix, sizeof prefix - 1);
        wasmext_write_raw(&msg, call.hook, call.hook_len);
        wasmext_write_raw(&msg, "'", 1);
        if (wasmext_writer_error(&msg) == WASMEXT_OK)
            wasmext_fail_n(&call, WASMEXT_E_UNHANDLED, strlen(WASMEXT_E_UNHANDLED),
                           (const char *)msg.buf, msg.len);
        else
            wasmext_fail(&call, WASMEXT_E_UNHANDLED, "no handler for this hook");
        wasmext_writer_free(&msg);
        return finish();
    }
    if (!hook->handler) {
        respond(&call, WASMEXT_UNCHANGED);
        return finish();
    }
    wasmext_write_raw(&g_out, k_value_prefix, sizeof k_value_prefix);
    call.out_start = g_out.len;
    respond(&call, hook->handler(&call));
    return finish();
}
