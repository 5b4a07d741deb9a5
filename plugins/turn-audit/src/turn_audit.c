/* turn-audit: onion middleware around turns, steps and tool calls.
 *
 * Every layer calls the host op {"op": "next", ...changes} exactly once, on
 * every path (bad data included: a layer must never break the chain). What it
 * does before is the pre-processing, what it does with the answer's value
 * (the inner result) the post-processing. A failed next answer becomes the
 * layer's own error, with the host's code and message.
 *
 *   turn       pre: metadata.audited_by = "turn-audit"
 *              post: " [audited]" after a text_response's response
 *   step       pre: tools named in setting hidden_tools removed
 *              post: the inner result unchanged
 *   tool_call  pre: calc's args.expression trimmed of ASCII whitespace
 *              post: "audited": true added to a result with status "ok" */
#include <string.h>
#include <wasmext.h>

static const uint8_t k_nil[1] = {0xc0};

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static bool str_field(const wasmext_reader *map, const char *key, const char **s, uint32_t *n) {
    wasmext_reader v;
    return wasmext_map_find(map, key, &v) == WASMEXT_OK && wasmext_read_str(&v, s, n) == WASMEXT_OK;
}

/* Send {"op": "next"} plus the `n_changes` key/value pairs encoded in
 * `changes` (NULL for none) and leave the host's answer in *answer, which the
 * caller frees. Returns WASMEXT_OK when the inner layers answered ok. */
static int call_next(const wasmext_writer *changes, uint32_t n_changes, wasmext_answer *answer) {
    wasmext_writer req = WASMEXT_WRITER_INIT;
    wasmext_write_map(&req, 1 + n_changes);
    wasmext_write_cstr(&req, "op");
    wasmext_write_cstr(&req, "next");
    if (n_changes) {
        wasmext_write_raw(&req, changes->buf, changes->len);
        if (wasmext_writer_error(changes) != WASMEXT_OK) req.err = changes->err;
    }
    int rc = wasmext_writer_error(&req);
    if (rc == WASMEXT_OK) {
        rc = wasmext_host_call(req.buf, req.len, answer);
    } else { /* no request could be built: report it the way a host answer would */
        static const char message[] = "could not build the next request (out of memory)";
        memset(answer, 0, sizeof *answer);
        answer->code = WASMEXT_E_LIMIT;
        answer->code_len = (uint32_t)strlen(WASMEXT_E_LIMIT);
        answer->message = message;
        answer->message_len = (uint32_t)(sizeof message - 1);
        rc = WASMEXT_ERR_HOST;
    }
    wasmext_writer_free(&req);
    return rc;
}

/* Write the map at `map` to w with `key` set to `value` (one encoded value):
 * in the key's place when the map has it, otherwise as a last pair. Every
 * other pair is copied in order. A `map` that is not a map counts as empty. */
static int write_map_with(const wasmext_reader *map, wasmext_writer *w, const char *key,
                          const wasmext_writer *value) {
    wasmext_reader r = *map;
    uint32_t pairs = 0, others = 0;
    if (wasmext_read_map(&r, &pairs) != WASMEXT_OK) pairs = 0;
    wasmext_reader scan = r;
    for (uint32_t i = 0; i < pairs; i++) { /* first pass: the count for the header */
        const char *k;
        uint32_t klen;
        int rc = wasmext_read_str(&scan, &k, &klen);
        if (rc == WASMEXT_OK) rc = wasmext_skip(&scan);
        if (rc != WASMEXT_OK) return rc;
        if (!wasmext_str_eq(k, klen, key)) others++;
    }
    bool written = false;
    wasmext_write_map(w, others + 1);
    for (uint32_t i = 0; i < pairs; i++) {
        const char *k;
        uint32_t klen;
        (void)wasmext_read_str(&r, &k, &klen); /* the first pass read them all */
        if (wasmext_str_eq(k, klen, key)) {
            if (!written) {
                wasmext_write_str(w, k, klen);
                wasmext_write_raw(w, value->buf, value->len);
                written = true;
            }
            (void)wasmext_skip(&r);
            continue;
        }
        wasmext_write_str(w, k, klen);
        int rc = wasmext_copy_value(&r, w);
        if (rc != WASMEXT_OK) return rc;
    }
    if (!written) {
        wasmext_write_cstr(w, key);
        wasmext_write_raw(w, value->buf, value->len);
    }
    if (wasmext_writer_error(value) != WASMEXT_OK) return wasmext_writer_error(value);
    return wasmext_writer_error(w);
}

/* The same; any failure also sticks to w, so a caller may check w once. */
static int copy_map_set(const wasmext_reader *map, wasmext_writer *w, const char *key,
                        const wasmext_writer *value) {
    int rc = write_map_with(map, w, key, value);
    if (rc != WASMEXT_OK && w->err == WASMEXT_OK) w->err = rc;
    return rc;
}

/* The verdict after next: pass a failed answer on, otherwise `v`. Frees the
 * answer either way. */
static wasmext_verdict finish(wasmext_call *call, wasmext_answer *inner, int rc,
                              wasmext_verdict v) {
    if (rc != WASMEXT_OK) v = wasmext_fail_answer(call, inner);
    wasmext_answer_free(inner);
    return v;
}

/* ---- turn ------------------------------------------------------------------- */

/* data {"turn_id", "input", "messages", "metadata"} -> result
 * {"finish_reason", "response", "error"?}. The metadata keeps what outer
 * layers put there and gains audited_by. */
static wasmext_verdict turn(wasmext_call *call) {
    wasmext_reader metadata;
    wasmext_writer changes = WASMEXT_WRITER_INIT, who = WASMEXT_WRITER_INIT;
    if (wasmext_map_find(&call->data, "metadata", &metadata) != WASMEXT_OK)
        wasmext_reader_init(&metadata, k_nil, sizeof k_nil); /* copied as {} */
    wasmext_write_cstr(&who, "turn-audit");
    wasmext_write_cstr(&changes, "metadata");
    (void)copy_map_set(&metadata, &changes, "audited_by", &who); /* errors stick */
    wasmext_writer_free(&who);

    wasmext_answer inner;
    int rc = call_next(&changes, 1, &inner);
    wasmext_writer_free(&changes);
    if (rc != WASMEXT_OK) return finish(call, &inner, rc, WASMEXT_UNCHANGED);

    static const char mark[] = " [audited]";
    const char *reason, *response;
    uint32_t rlen, n;
    if (!str_field(&inner.value, "finish_reason", &reason, &rlen) ||
        !wasmext_str_eq(reason, rlen, "text_response") ||
        !str_field(&inner.value, "response", &response, &n))
        return finish(call, &inner, rc, WASMEXT_UNCHANGED);
    wasmext_writer text = WASMEXT_WRITER_INIT, value = WASMEXT_WRITER_INIT;
    wasmext_write_raw(&text, response, n);
    wasmext_write_raw(&text, mark, sizeof mark - 1);
    wasmext_write_str(&value, (const char *)text.buf, text.len);
    if (wasmext_writer_error(&text) != WASMEXT_OK) value.err = text.err;
    wasmext_verdict v = WASMEXT_VALUE;
    if (copy_map_set(&inner.value, call->out, "response", &value) != WASMEXT_OK)
        v = wasmext_fail(call, WASMEXT_E_LIMIT, "out of memory");
    wasmext_writer_free(&text);
    wasmext_writer_free(&value);
    return finish(call, &inner, rc, v);
}

/* ---- step ------------------------------------------------------------------- */

/* Is `name` one of the comma-separated items of `list` (items trimmed)? */
static bool listed(const char *list, uint32_t list_len, const char *name, uint32_t n) {
    for (uint32_t start = 0; start <= list_len;) {
        uint32_t end = start;
        while (end < list_len && list[end] != ',') end++;
        uint32_t a = start, b = end;
        while (a < b && is_space(list[a])) a++;
        while (b > a && is_space(list[b - 1])) b--;
        if (b > a && b - a == n && memcmp(list + a, name, n) == 0) return true;
        start = end + 1;
    }
    return false;
}

/* data {"turn_id", "step", "messages", "tools": [{"name", "description"}],
 * "metadata"}: next gets the tools whose name is not in hidden_tools (tools
 * without a string name are kept); the inner result is answered unchanged. */
static wasmext_verdict step(wasmext_call *call) {
    wasmext_answer hidden;
    const char *list = "debug"; /* the manifest default, for a host without one */
    uint32_t list_len = 5;
    if (wasmext_config_get("hidden_tools", &hidden) == WASMEXT_OK &&
        wasmext_read_str(&hidden.value, &list, &list_len) != WASMEXT_OK)
        list = "", list_len = 0; /* not a string: hide nothing */

    wasmext_reader tools;
    uint32_t count = 0, kept = 0, n_changes = 0;
    wasmext_writer kept_tools = WASMEXT_WRITER_INIT, changes = WASMEXT_WRITER_INIT;
    if (wasmext_map_find(&call->data, "tools", &tools) == WASMEXT_OK &&
        wasmext_read_array(&tools, &count) == WASMEXT_OK) {
        for (uint32_t i = 0; i < count; i++) {
            const char *name;
            uint32_t n;
            if (str_field(&tools, "name", &name, &n) && listed(list, list_len, name, n)) {
                (void)wasmext_skip(&tools);
            } else {
                (void)wasmext_copy_value(&tools, &kept_tools);
                kept++;
            }
        }
        wasmext_write_cstr(&changes, "tools");
        wasmext_write_array(&changes, kept);
        wasmext_write_raw(&changes, kept_tools.buf, kept_tools.len);
        if (wasmext_writer_error(&kept_tools) != WASMEXT_OK) changes.err = kept_tools.err;
        n_changes = 1;
    }
    wasmext_answer_free(&hidden); /* list pointed into it until here */
    wasmext_writer_free(&kept_tools);

    wasmext_answer inner;
    int rc = call_next(&changes, n_changes, &inner);
    wasmext_writer_free(&changes);
    return finish(call, &inner, rc, WASMEXT_UNCHANGED);
}

/* ---- tool_call -------------------------------------------------------------- */

/* data {"turn_id", "step", "call_id", "tool", "args", "metadata"} -> result
 * {"status", "output", "error"?}. */
static wasmext_verdict tool_call(wasmext_call *call) {
    const char *tool, *expr;
    uint32_t tlen, n, n_changes = 0;
    wasmext_reader args;
    wasmext_writer changes = WASMEXT_WRITER_INIT;
    if (str_field(&call->data, "tool", &tool, &tlen) && wasmext_str_eq(tool, tlen, "calc") &&
        wasmext_map_find(&call->data, "args", &args) == WASMEXT_OK &&
        str_field(&args, "expression", &expr, &n)) {
        uint32_t a = 0, b = n;
        while (a < b && is_space(expr[a])) a++;
        while (b > a && is_space(expr[b - 1])) b--;
        wasmext_writer trimmed = WASMEXT_WRITER_INIT;
        wasmext_write_str(&trimmed, expr + a, b - a);
        wasmext_write_cstr(&changes, "args");
        (void)copy_map_set(&args, &changes, "expression", &trimmed); /* errors stick */
        wasmext_writer_free(&trimmed);
        n_changes = 1;
    }
    wasmext_answer inner;
    int rc = call_next(&changes, n_changes, &inner);
    wasmext_writer_free(&changes);
    if (rc != WASMEXT_OK) return finish(call, &inner, rc, WASMEXT_UNCHANGED);

    const char *status;
    uint32_t slen;
    if (!str_field(&inner.value, "status", &status, &slen) || !wasmext_str_eq(status, slen, "ok"))
        return finish(call, &inner, rc, WASMEXT_UNCHANGED);
    static const uint8_t k_true[1] = {0xc3};
    wasmext_writer yes = WASMEXT_WRITER_INIT;
    wasmext_write_raw(&yes, k_true, sizeof k_true);
    wasmext_verdict v = WASMEXT_VALUE;
    if (copy_map_set(&inner.value, call->out, "audited", &yes) != WASMEXT_OK)
        v = wasmext_fail(call, WASMEXT_E_LIMIT, "out of memory");
    wasmext_writer_free(&yes);
    return finish(call, &inner, rc, v);
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("turn", turn),
    WASMEXT_HOOK("step", step),
    WASMEXT_HOOK("tool_call", tool_call),
};

WASMEXT_PLUGIN("turn-audit", "0.1.0", hooks);
