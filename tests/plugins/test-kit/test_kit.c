/* test-kit: on_plain_text behaves as the "mode" setting says, so one build
 * serves every ordering and chaining test (loaded under many plugin ids). */
#include <string.h>
#include <wasmext.h>

static int setting(const char *key, const char **out, uint32_t *len, wasmext_answer *a) {
    if (wasmext_config_get(key, a) != WASMEXT_OK) return -1;
    return wasmext_read_str(&a->value, out, len);
}

static wasmext_verdict plain_text(wasmext_call *call) {
    const char *text, *mode, *tag;
    uint32_t text_len, mode_len, tag_len;
    wasmext_answer m, t;
    if (wasmext_data_str(call, &text, &text_len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "on_plain_text expects a string");
    if (setting("mode", &mode, &mode_len, &m) != WASMEXT_OK ||
        setting("tag", &tag, &tag_len, &t) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "settings mode and tag are required");
    wasmext_verdict v = WASMEXT_UNCHANGED;
    if (wasmext_str_eq(mode, mode_len, "fail")) {
        v = wasmext_fail(call, WASMEXT_E_FAILED, "asked to fail");
    } else if (wasmext_str_eq(mode, mode_len, "trap")) {
        __builtin_trap();
    } else if (wasmext_str_eq(mode, mode_len, "bad")) {
        wasmext_write_int(call->out, 42);
        v = WASMEXT_VALUE;
    } else if (wasmext_str_eq(mode, mode_len, "append") ||
               wasmext_str_eq(mode, mode_len, "stop")) {
        wasmext_writer joined = WASMEXT_WRITER_INIT;
        wasmext_write_raw(&joined, text, text_len);
        wasmext_write_raw(&joined, tag, tag_len);
        v = wasmext_return_str(call, (const char *)joined.buf, joined.len);
        wasmext_writer_free(&joined);
        if (wasmext_str_eq(mode, mode_len, "stop") && v == WASMEXT_VALUE) v = WASMEXT_STOP;
    }
    wasmext_answer_free(&m);
    wasmext_answer_free(&t);
    return v;
}

/* on_tag for tags starting with "t": "<name>(<content>)", so nesting and
 * innermost-first order are visible in the result. */
static wasmext_verdict tag(wasmext_call *call) {
    wasmext_reader name, content;
    const char *n, *c;
    uint32_t n_len, c_len;
    if (wasmext_map_find(&call->data, "tag", &name) != WASMEXT_OK ||
        wasmext_map_find(&call->data, "content", &content) != WASMEXT_OK ||
        wasmext_read_str(&name, &n, &n_len) != WASMEXT_OK ||
        wasmext_read_str(&content, &c, &c_len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "on_tag data needs tag and content");
    wasmext_writer text = WASMEXT_WRITER_INIT;
    wasmext_write_raw(&text, n, n_len);
    wasmext_write_raw(&text, "(", 1);
    wasmext_write_raw(&text, c, c_len);
    wasmext_write_raw(&text, ")", 1);
    wasmext_verdict v = wasmext_return_str(call, (const char *)text.buf, text.len);
    wasmext_writer_free(&text);
    return v;
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("on_plain_text", plain_text),
    {"on_tag", WASMEXT_PRIORITY_DEFAULT, "t*", tag},
};

WASMEXT_PLUGIN("test-kit", "0.1.0", hooks);
