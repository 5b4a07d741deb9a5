/* agent-guard: lifecycle hooks (session_start, before_model, before_tool,
 * after_tool), a pipeline validator, and prompt additions plus tool guidance
 * in its registration map. */
#include <string.h>
#include <wasmext.h>

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

/* Is `needle` (n bytes) one of the comma-separated items of `list`? With
 * `substring`, is any item contained in `needle` instead (ASCII case-folded)? */
static bool listed(const char *list, uint32_t list_len, const char *needle, uint32_t n,
                   bool substring, const char **hit, uint32_t *hit_len) {
    uint32_t start = 0;
    while (start <= list_len) {
        uint32_t end = start;
        while (end < list_len && list[end] != ',') end++;
        uint32_t a = start, b = end;
        while (a < b && list[a] == ' ') a++;
        while (b > a && list[b - 1] == ' ') b--;
        uint32_t len = b - a;
        if (len && !substring && len == n && memcmp(list + a, needle, n) == 0) goto found;
        for (uint32_t i = 0; len && substring && i + len <= n; i++) {
            uint32_t k = 0;
            while (k < len && lower(needle[i + k]) == lower(list[a + k])) k++;
            if (k == len) goto found;
        }
        start = end + 1;
        continue;
    found:
        *hit = list + a;
        *hit_len = len;
        return true;
    }
    return false;
}

static bool setting_has(const char *key, const char *s, uint32_t n, bool substring,
                        wasmext_writer *hit) {
    wasmext_answer a;
    const char *list, *h;
    uint32_t len, hlen;
    bool found = false;
    if (wasmext_config_get(key, &a) == WASMEXT_OK &&
        wasmext_read_str(&a.value, &list, &len) == WASMEXT_OK &&
        listed(list, len, s, n, substring, &h, &hlen)) {
        wasmext_write_raw(hit, h, hlen);
        found = true;
    }
    wasmext_answer_free(&a);
    return found;
}

static wasmext_verdict say(wasmext_call *call, const char *message) {
    wasmext_write_map(call->out, 2);
    wasmext_write_cstr(call->out, "continue");
    wasmext_write_bool(call->out, true);
    wasmext_write_cstr(call->out, "system_message");
    wasmext_write_cstr(call->out, message);
    return WASMEXT_VALUE;
}

static wasmext_verdict session_start(wasmext_call *call) {
    return say(call, "agent-guard: tools on the block list are refused.");
}

static wasmext_verdict before_model(wasmext_call *call) {
    return say(call, "agent-guard: answer briefly.");
}

static wasmext_verdict before_tool(wasmext_call *call) {
    wasmext_reader f;
    const char *tool;
    uint32_t n;
    if (wasmext_map_find(&call->data, "tool_name", &f) != WASMEXT_OK ||
        wasmext_read_str(&f, &tool, &n) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "before_tool data needs tool_name");
    wasmext_writer hit = WASMEXT_WRITER_INIT, reason = WASMEXT_WRITER_INIT;
    bool blocked = setting_has("blocked_tools", tool, n, false, &hit);
    wasmext_write_map(call->out, 2);
    wasmext_write_cstr(call->out, "continue");
    wasmext_write_bool(call->out, !blocked);
    wasmext_write_cstr(call->out, blocked ? "stop_reason" : "checked");
    if (blocked) wasmext_write_raw(&reason, "agent-guard blocked tool ", 25);
    wasmext_write_raw(&reason, tool, n);
    wasmext_write_str(call->out, (const char *)reason.buf, reason.len);
    wasmext_writer_free(&hit);
    wasmext_writer_free(&reason);
    return WASMEXT_VALUE;
}

static wasmext_verdict after_tool(wasmext_call *call) {
    wasmext_write_map(call->out, 1);
    wasmext_write_cstr(call->out, "continue");
    wasmext_write_bool(call->out, true);
    return WASMEXT_VALUE;
}

/* Pipeline validator: reject a payload that contains a banned word. */
static wasmext_verdict validator(wasmext_call *call) {
    wasmext_reader msg, payload;
    const char *text;
    uint32_t n;
    if (wasmext_map_find(&call->data, "message", &msg) != WASMEXT_OK ||
        wasmext_map_find(&msg, "payload", &payload) != WASMEXT_OK ||
        wasmext_read_str(&payload, &text, &n) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "validator data needs message.payload");
    wasmext_writer hit = WASMEXT_WRITER_INIT, reason = WASMEXT_WRITER_INIT;
    bool banned = setting_has("banned_words", text, n, true, &hit);
    wasmext_write_map(call->out, banned ? 2 : 1);
    wasmext_write_cstr(call->out, "status");
    wasmext_write_cstr(call->out, banned ? "reject" : "ok");
    if (banned) {
        wasmext_write_raw(&reason, "banned word: ", 13);
        wasmext_write_raw(&reason, hit.buf, hit.len);
        wasmext_write_cstr(call->out, "reason");
        wasmext_write_str(call->out, (const char *)reason.buf, reason.len);
    }
    wasmext_writer_free(&hit);
    wasmext_writer_free(&reason);
    return WASMEXT_VALUE;
}

static void write_names(wasmext_writer *w, const char *const *names, uint32_t n) {
    wasmext_write_array(w, n);
    for (uint32_t i = 0; i < n; i++) wasmext_write_cstr(w, names[i]);
}

/* "prompt" additions and "tool_guidance", as docs/hooks.md describes them. */
static uint32_t extra(wasmext_writer *w) {
    static const char *const preferred[] = {"calc"}, *const avoided[] = {"shell"},
                             *const order[] = {"clock", "calc"};
    wasmext_write_cstr(w, "prompt");
    wasmext_write_array(w, 2);
    wasmext_write_map(w, 2);
    wasmext_write_cstr(w, "position");
    wasmext_write_cstr(w, "system_suffix");
    wasmext_write_cstr(w, "content");
    wasmext_write_cstr(w, "Never run shell commands.");
    wasmext_write_map(w, 3);
    wasmext_write_cstr(w, "position");
    wasmext_write_cstr(w, "user_prefix");
    wasmext_write_cstr(w, "content");
    wasmext_write_cstr(w, "[guarded] ");
    wasmext_write_cstr(w, "when");
    wasmext_write_map(w, 1);
    wasmext_write_cstr(w, "tag_present");
    wasmext_write_cstr(w, "guarded");
    wasmext_write_cstr(w, "tool_guidance");
    wasmext_write_map(w, 3);
    wasmext_write_cstr(w, "preferred");
    write_names(w, preferred, 1);
    wasmext_write_cstr(w, "avoided");
    write_names(w, avoided, 1);
    wasmext_write_cstr(w, "order");
    write_names(w, order, 2);
    return 2;
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("session_start", session_start),
    WASMEXT_HOOK("before_model", before_model),
    WASMEXT_HOOK("before_tool", before_tool),
    WASMEXT_HOOK("after_tool", after_tool),
    WASMEXT_HOOK("validator", validator),
};

WASMEXT_PLUGIN_EX("agent-guard", "0.1.0", hooks, extra);
