/* agent-guard: lifecycle hooks (session_start, before_model, before_tool,
 * after_tool), a pipeline validator, and prompt additions plus tool guidance
 * as extra entries of its registration map (WASMEXT_PLUGIN_EX).
 *
 * Settings (comma-separated strings, items trimmed of ASCII whitespace):
 *   blocked_tools  tool names before_tool refuses (exact match)   "shell"
 *   banned_words   words the validator rejects (ASCII case-insensitive
 *                  substring of the payload)                       "password" */
#include <string.h>
#include <wasmext.h>

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

/* Does `hay` contain `needle`, ASCII letters compared case-insensitively?
 * Non-ASCII bytes compare exactly, so UTF-8 text is matched byte for byte. */
static bool contains_nocase(const char *hay, uint32_t n, const char *needle, uint32_t len) {
    for (uint32_t i = 0; len <= n && i <= n - len; i++) {
        uint32_t k = 0;
        while (k < len && lower(hay[i + k]) == lower(needle[k])) k++;
        if (k == len) return true;
    }
    return false;
}

/* A comma-separated list: calls `match` on each non-empty trimmed item until
 * it says yes; the item that matched is left in *hit / *hit_len. */
typedef bool (*item_match)(const char *item, uint32_t len, const char *s, uint32_t n);

static bool find_item(const char *list, uint32_t list_len, const char *s, uint32_t n,
                      item_match match, const char **hit, uint32_t *hit_len) {
    for (uint32_t start = 0; start <= list_len;) {
        uint32_t end = start;
        while (end < list_len && list[end] != ',') end++;
        uint32_t a = start, b = end;
        while (a < b && is_space(list[a])) a++;
        while (b > a && is_space(list[b - 1])) b--;
        if (b > a && match(list + a, b - a, s, n)) {
            *hit = list + a;
            *hit_len = b - a;
            return true;
        }
        start = end + 1;
    }
    return false;
}

static bool same_name(const char *item, uint32_t len, const char *s, uint32_t n) {
    return len == n && memcmp(item, s, n) == 0;
}

static bool in_text(const char *item, uint32_t len, const char *s, uint32_t n) {
    return contains_nocase(s, n, item, len);
}

/* Read a list setting. The host answers the manifest default; `fallback`
 * (the same default) covers a host that has no value at all (not_found). On
 * success *list points into *a or at `fallback`; the caller frees *a. Any
 * other failure, or a value that is not a string (`not_str` says so), fails
 * the call. */
static bool read_list(wasmext_call *call, const char *key, const char *fallback,
                      const char *not_str, wasmext_answer *a, const char **list,
                      uint32_t *len, wasmext_verdict *failed) {
    if (wasmext_config_get(key, a) != WASMEXT_OK) {
        if (!wasmext_answer_is(a, WASMEXT_E_NOT_FOUND)) {
            *failed = wasmext_fail_answer(call, a);
            return false;
        }
        *list = fallback;
        *len = (uint32_t)strlen(fallback);
        return true;
    }
    if (wasmext_read_str(&a->value, list, len) != WASMEXT_OK) {
        *failed = wasmext_fail(call, WASMEXT_E_INVALID, not_str);
        return false;
    }
    return true;
}

/* ---- lifecycle ------------------------------------------------------------ */

/* {"continue": true, "system_message": message} */
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

/* {"tool_name", "args", ...}: refuse a blocked tool, else note it was checked. */
static wasmext_verdict before_tool(wasmext_call *call) {
    static const char prefix[] = "agent-guard blocked tool ";
    wasmext_reader f;
    const char *tool, *list, *hit;
    uint32_t n, list_len, hit_len;
    if (wasmext_map_find(&call->data, "tool_name", &f) != WASMEXT_OK ||
        wasmext_read_str(&f, &tool, &n) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "before_tool data needs a string \"tool_name\"");
    wasmext_answer setting;
    wasmext_verdict failed;
    if (!read_list(call, "blocked_tools", "shell",
                   "setting blocked_tools must be a comma-separated string", &setting, &list, &list_len, &failed)) {
        wasmext_answer_free(&setting);
        return failed;
    }
    bool blocked = find_item(list, list_len, tool, n, same_name, &hit, &hit_len);
    wasmext_answer_free(&setting);
    wasmext_write_map(call->out, 2);
    wasmext_write_cstr(call->out, "continue");
    wasmext_write_bool(call->out, !blocked);
    if (!blocked) {
        wasmext_write_cstr(call->out, "checked");
        wasmext_write_str(call->out, tool, n);
        return WASMEXT_VALUE;
    }
    wasmext_writer reason = WASMEXT_WRITER_INIT;
    wasmext_write_raw(&reason, prefix, sizeof prefix - 1);
    wasmext_write_raw(&reason, tool, n);
    wasmext_verdict v = WASMEXT_VALUE;
    if (wasmext_writer_error(&reason) != WASMEXT_OK)
        v = wasmext_fail(call, WASMEXT_E_LIMIT, "out of memory");
    else {
        wasmext_write_cstr(call->out, "stop_reason");
        wasmext_write_str(call->out, (const char *)reason.buf, reason.len);
    }
    wasmext_writer_free(&reason);
    return v;
}

static wasmext_verdict after_tool(wasmext_call *call) {
    wasmext_write_map(call->out, 1);
    wasmext_write_cstr(call->out, "continue");
    wasmext_write_bool(call->out, true);
    return WASMEXT_VALUE;
}

/* ---- pipeline validator --------------------------------------------------- */

/* {"message": {"payload", ...}, "context", "config"} -> {"status": "ok"}, or
 * {"status": "reject", "reason": "banned word: W"} for the first word of the
 * list that occurs in the payload. */
static wasmext_verdict validator(wasmext_call *call) {
    static const char prefix[] = "banned word: ";
    wasmext_reader msg, payload;
    const char *text, *list, *hit;
    uint32_t n, list_len, hit_len;
    if (wasmext_map_find(&call->data, "message", &msg) != WASMEXT_OK ||
        wasmext_map_find(&msg, "payload", &payload) != WASMEXT_OK ||
        wasmext_read_str(&payload, &text, &n) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "validator data needs a string message.payload");
    wasmext_answer setting;
    wasmext_verdict failed;
    if (!read_list(call, "banned_words", "password",
                   "setting banned_words must be a comma-separated string", &setting, &list, &list_len, &failed)) {
        wasmext_answer_free(&setting);
        return failed;
    }
    wasmext_writer reason = WASMEXT_WRITER_INIT;
    bool banned = find_item(list, list_len, text, n, in_text, &hit, &hit_len);
    if (banned) {
        wasmext_write_raw(&reason, prefix, sizeof prefix - 1);
        wasmext_write_raw(&reason, hit, hit_len);
    }
    wasmext_answer_free(&setting); /* hit pointed into it until here */
    wasmext_verdict v = WASMEXT_VALUE;
    if (wasmext_writer_error(&reason) != WASMEXT_OK) {
        v = wasmext_fail(call, WASMEXT_E_LIMIT, "out of memory");
    } else {
        wasmext_write_map(call->out, banned ? 2 : 1);
        wasmext_write_cstr(call->out, "status");
        wasmext_write_cstr(call->out, banned ? "reject" : "ok");
        if (banned) {
            wasmext_write_cstr(call->out, "reason");
            wasmext_write_str(call->out, (const char *)reason.buf, reason.len);
        }
    }
    wasmext_writer_free(&reason);
    return v;
}

/* ---- registration map extras ---------------------------------------------- */

static void write_names(wasmext_writer *w, const char *const *names, uint32_t n) {
    wasmext_write_array(w, n);
    for (uint32_t i = 0; i < n; i++) wasmext_write_cstr(w, names[i]);
}

static void write_pair(wasmext_writer *w, const char *key, const char *value) {
    wasmext_write_cstr(w, key);
    wasmext_write_cstr(w, value);
}

/* "prompt" additions and "tool_guidance" (docs/hooks.md, last section):
 * two key/value pairs after the SDK's own abi_minor, name, version, hooks. */
static uint32_t extra(wasmext_writer *w) {
    static const char *const preferred[] = {"calc"};
    static const char *const avoided[] = {"shell"};
    static const char *const order[] = {"clock", "calc"};
    wasmext_write_cstr(w, "prompt");
    wasmext_write_array(w, 2);
    wasmext_write_map(w, 2);
    write_pair(w, "position", "system_suffix");
    write_pair(w, "content", "Never run shell commands.");
    wasmext_write_map(w, 3);
    write_pair(w, "position", "user_prefix");
    write_pair(w, "content", "[guarded] ");
    wasmext_write_cstr(w, "when");
    wasmext_write_map(w, 1);
    write_pair(w, "tag_present", "guarded");

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
