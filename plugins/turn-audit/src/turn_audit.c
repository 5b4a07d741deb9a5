/* turn-audit: middleware around turns, steps and tool calls. Each layer
 * calls the host op "next" exactly once; what it writes before is the
 * pre-processing, what it does with the answer the post-processing. */
#include <string.h>
#include <wasmext.h>

/* Send {"op": "next", ...} (the request's extra entries are in `changes`,
 * `n_changes` pairs) and leave the inner result in *answer. */
static int call_next(const wasmext_writer *changes, uint32_t n_changes, wasmext_answer *answer) {
    wasmext_writer req = WASMEXT_WRITER_INIT;
    wasmext_write_map(&req, 1 + n_changes);
    wasmext_write_cstr(&req, "op");
    wasmext_write_cstr(&req, "next");
    if (n_changes) wasmext_write_raw(&req, changes->buf, changes->len);
    int rc = wasmext_writer_error(&req);
    if (rc == WASMEXT_OK) {
        rc = wasmext_host_call(req.buf, req.len, answer);
    } else { /* no request, so no answer: describe the failure like one */
        memset(answer, 0, sizeof *answer);
        answer->code = WASMEXT_E_LIMIT;
        answer->code_len = (uint32_t)strlen(WASMEXT_E_LIMIT);
        answer->message = "out of memory building the next request";
        answer->message_len = (uint32_t)strlen(answer->message);
    }
    wasmext_writer_free(&req);
    return rc;
}

/* Copy the map at r to w with one extra pair written by the caller after it:
 * returns the number of pairs copied (the caller adds its own). */
static int copy_map_except(wasmext_reader r, wasmext_writer *w, const char *skip,
                           uint32_t extra_pairs) {
    uint32_t pairs, kept = 0;
    wasmext_reader scan = r;
    if (wasmext_read_map(&scan, &pairs) != WASMEXT_OK) return WASMEXT_ERR_TYPE;
    for (uint32_t i = 0; i < pairs; i++) {
        const char *k;
        uint32_t klen;
        if (wasmext_read_str(&scan, &k, &klen) != WASMEXT_OK) return WASMEXT_ERR_TYPE;
        if (!wasmext_str_eq(k, klen, skip)) kept++;
        wasmext_skip(&scan);
    }
    wasmext_write_map(w, kept + extra_pairs);
    (void)wasmext_read_map(&r, &pairs);
    for (uint32_t i = 0; i < pairs; i++) {
        const char *k;
        uint32_t klen;
        (void)wasmext_read_str(&r, &k, &klen);
        if (wasmext_str_eq(k, klen, skip)) { wasmext_skip(&r); continue; }
        wasmext_write_str(w, k, klen);
        if (wasmext_copy_value(&r, w) != WASMEXT_OK) return WASMEXT_ERR_MALFORMED;
    }
    return WASMEXT_OK;
}

static bool str_field(const wasmext_reader *map, const char *key, const char **s, uint32_t *n) {
    wasmext_reader v;
    return wasmext_map_find(map, key, &v) == WASMEXT_OK && wasmext_read_str(&v, s, n) == WASMEXT_OK;
}

/* turn: tag the metadata before, mark text answers "[audited]" after. */
static wasmext_verdict turn(wasmext_call *call) {
    wasmext_writer changes = WASMEXT_WRITER_INIT;
    wasmext_write_cstr(&changes, "metadata");
    wasmext_write_map(&changes, 1);
    wasmext_write_cstr(&changes, "audited_by");
    wasmext_write_cstr(&changes, "turn-audit");
    wasmext_answer inner;
    int rc = call_next(&changes, 1, &inner);
    wasmext_writer_free(&changes);
    if (rc != WASMEXT_OK || !inner.ok) {
        wasmext_verdict v = wasmext_fail_answer(call, &inner);
        wasmext_answer_free(&inner);
        return v;
    }
    const char *reason, *response;
    uint32_t rlen, n;
    wasmext_verdict v = WASMEXT_UNCHANGED;
    if (str_field(&inner.value, "finish_reason", &reason, &rlen) &&
        wasmext_str_eq(reason, rlen, "text_response") &&
        str_field(&inner.value, "response", &response, &n) &&
        copy_map_except(inner.value, call->out, "response", 1) == WASMEXT_OK) {
        wasmext_writer text = WASMEXT_WRITER_INIT;
        wasmext_write_raw(&text, response, n);
        wasmext_write_raw(&text, " [audited]", 10);
        wasmext_write_cstr(call->out, "response");
        wasmext_write_str(call->out, (const char *)text.buf, text.len);
        wasmext_writer_free(&text);
        v = WASMEXT_VALUE;
    }
    wasmext_answer_free(&inner);
    return v;
}

/* step: drop the hidden tools from the catalog the model sees. */
static wasmext_verdict step(wasmext_call *call) {
    wasmext_answer hidden;
    const char *list = "";
    uint32_t list_len = 0;
    if (wasmext_config_get("hidden_tools", &hidden) == WASMEXT_OK)
        (void)wasmext_read_str(&hidden.value, &list, &list_len);
    wasmext_reader tools, it;
    uint32_t count = 0, kept = 0;
    if (wasmext_map_find(&call->data, "tools", &tools) != WASMEXT_OK ||
        wasmext_read_array(&tools, &count) != WASMEXT_OK) count = 0;
    wasmext_writer kept_tools = WASMEXT_WRITER_INIT;
    it = tools;
    for (uint32_t i = 0; i < count; i++) {
        const char *name;
        uint32_t n;
        wasmext_reader item = it;
        bool hide = false;
        if (str_field(&item, "name", &name, &n)) {
            for (uint32_t a = 0; a < list_len;) {
                uint32_t b = a;
                while (b < list_len && list[b] != ',') b++;
                if (b - a == n && memcmp(list + a, name, n) == 0) hide = true;
                a = b + 1;
            }
        }
        if (!hide) { wasmext_copy_value(&it, &kept_tools); kept++; } else wasmext_skip(&it);
    }
    wasmext_writer changes = WASMEXT_WRITER_INIT;
    wasmext_write_cstr(&changes, "tools");
    wasmext_write_array(&changes, kept);
    wasmext_write_raw(&changes, kept_tools.buf, kept_tools.len);
    wasmext_answer inner;
    int rc = call_next(&changes, 1, &inner);
    wasmext_writer_free(&changes);
    wasmext_writer_free(&kept_tools);
    wasmext_answer_free(&hidden);
    wasmext_verdict v = (rc == WASMEXT_OK && inner.ok) ? WASMEXT_UNCHANGED
                                                        : wasmext_fail_answer(call, &inner);
    wasmext_answer_free(&inner);
    return v;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n'; }

/* tool_call: trim calc's expression before; mark successful results after. */
static wasmext_verdict tool_call(wasmext_call *call) {
    const char *tool, *expr;
    uint32_t tlen, n;
    wasmext_reader args;
    wasmext_writer changes = WASMEXT_WRITER_INIT;
    uint32_t n_changes = 0;
    if (str_field(&call->data, "tool", &tool, &tlen) && wasmext_str_eq(tool, tlen, "calc") &&
        wasmext_map_find(&call->data, "args", &args) == WASMEXT_OK &&
        str_field(&args, "expression", &expr, &n)) {
        uint32_t a = 0, b = n;
        while (a < b && is_space(expr[a])) a++;
        while (b > a && is_space(expr[b - 1])) b--;
        wasmext_write_cstr(&changes, "args");
        if (copy_map_except(args, &changes, "expression", 1) == WASMEXT_OK) {
            wasmext_write_cstr(&changes, "expression");
            wasmext_write_str(&changes, expr + a, b - a);
            n_changes = 1;
        }
    }
    wasmext_answer inner;
    int rc = call_next(&changes, n_changes, &inner);
    wasmext_writer_free(&changes);
    if (rc != WASMEXT_OK || !inner.ok) {
        wasmext_verdict v = wasmext_fail_answer(call, &inner);
        wasmext_answer_free(&inner);
        return v;
    }
    const char *status;
    uint32_t slen;
    wasmext_verdict v = WASMEXT_UNCHANGED;
    if (str_field(&inner.value, "status", &status, &slen) && wasmext_str_eq(status, slen, "ok") &&
        copy_map_except(inner.value, call->out, "audited", 1) == WASMEXT_OK) {
        wasmext_write_cstr(call->out, "audited");
        wasmext_write_bool(call->out, true);
        v = WASMEXT_VALUE;
    }
    wasmext_answer_free(&inner);
    return v;
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("turn", turn),
    WASMEXT_HOOK("step", step),
    WASMEXT_HOOK("tool_call", tool_call),
};

WASMEXT_PLUGIN("turn-audit", "0.1.0", hooks);
