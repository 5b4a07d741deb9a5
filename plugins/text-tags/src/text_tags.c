/* text-tags: tag handlers, output extensions and an input transform in one
 * plugin. Every handler reads exactly the data docs/hooks.md gives its kind.
 *
 *   on_tag "upper"              content with ASCII letters uppercased
 *   on_tag "redact*"            "[REDACTED]"
 *   output_extension wordcount  word count (param "brief") or a summary map
 *   output_extension shout      {"text": answer uppercased, "saw": [earlier]}
 *   on_input_messages           every message's content trimmed
 *
 * Text is UTF-8: only ASCII bytes are ever changed or treated as separators,
 * so multi-byte sequences pass through whole. */
#include <string.h>
#include <wasmext.h>

/* ASCII whitespace, as C's isspace() in the "C" locale. */
static bool is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* The string value of `key` in the map at `map`. */
static bool field_str(const wasmext_reader *map, const char *key, const char **s, uint32_t *n) {
    wasmext_reader v;
    return wasmext_map_find(map, key, &v) == WASMEXT_OK && wasmext_read_str(&v, s, n) == WASMEXT_OK;
}

/* Write s as a string value with its ASCII letters uppercased. The str is
 * written first and then changed in place in the writer, so nothing is
 * copied twice; UTF-8 lead and continuation bytes are >= 0x80 and untouched. */
static void write_upper(wasmext_writer *w, const char *s, uint32_t n) {
    wasmext_write_str(w, s, n);
    if (wasmext_writer_error(w) != WASMEXT_OK) return;
    for (size_t i = w->len - n; i < w->len; i++)
        if (w->buf[i] >= 'a' && w->buf[i] <= 'z') w->buf[i] = (uint8_t)(w->buf[i] - 'a' + 'A');
}

/* ---- tags ----------------------------------------------------------------- */

/* <upper>text</upper> -> TEXT. data: {"tag", "attrs", "content"}. */
static wasmext_verdict upper(wasmext_call *call) {
    const char *content;
    uint32_t n;
    if (!field_str(&call->data, "content", &content, &n))
        return wasmext_fail(call, WASMEXT_E_INVALID, "on_tag data needs a string \"content\"");
    write_upper(call->out, content, n);
    return WASMEXT_VALUE;
}

/* <redact>, <redact-email>, <redact...>: whatever is inside -> [REDACTED]. */
static wasmext_verdict redact(wasmext_call *call) {
    static const char text[] = "[REDACTED]";
    return wasmext_return_str(call, text, sizeof text - 1);
}

/* ---- output extensions ---------------------------------------------------- */

/* Words are runs of bytes that are not ASCII whitespace; characters are
 * UTF-8 code points (every byte that is not a continuation byte 10xxxxxx). */
static void count_text(const char *s, uint32_t n, uint32_t *words, uint32_t *chars) {
    bool in_word = false;
    *words = *chars = 0;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool space = is_space(c);
        if (!space && !in_word) (*words)++;
        in_word = !space;
        if ((c & 0xC0) != 0x80) (*chars)++;
    }
}

/* The names of the earlier results (the "name" of each map of data.previous,
 * in order) as an array; an empty array when there is no previous list. */
static void write_previous(wasmext_call *call) {
    wasmext_reader it;
    uint32_t count = 0;
    if (wasmext_map_find(&call->data, "previous", &it) != WASMEXT_OK ||
        wasmext_read_array(&it, &count) != WASMEXT_OK)
        count = 0;
    wasmext_write_array(call->out, count);
    for (uint32_t i = 0; i < count; i++) {
        wasmext_reader name_at;
        const char *name = "";
        uint32_t len = 0;
        if (wasmext_map_find(&it, "name", &name_at) != WASMEXT_OK ||
            wasmext_read_str(&name_at, &name, &len) != WASMEXT_OK)
            len = 0; /* not a result map: an empty name keeps the array's length */
        wasmext_write_str(call->out, name, len);
        (void)wasmext_skip(&it);
    }
}

/* #wordcount -> {"words", "chars", "previous": [names]}; #wordcount:brief -> words. */
static wasmext_verdict wordcount(wasmext_call *call) {
    const char *answer, *param;
    uint32_t n, plen, words, chars;
    if (!field_str(&call->data, "answer", &answer, &n))
        return wasmext_fail(call, WASMEXT_E_INVALID, "output_extension data needs a string \"answer\"");
    count_text(answer, n, &words, &chars);
    if (field_str(&call->data, "param", &param, &plen) && wasmext_str_eq(param, plen, "brief")) {
        wasmext_write_uint(call->out, words);
        return WASMEXT_VALUE;
    }
    wasmext_write_map(call->out, 3);
    wasmext_write_cstr(call->out, "words");
    wasmext_write_uint(call->out, words);
    wasmext_write_cstr(call->out, "chars");
    wasmext_write_uint(call->out, chars);
    wasmext_write_cstr(call->out, "previous");
    write_previous(call);
    return WASMEXT_VALUE;
}

/* #shout -> {"text": the answer uppercased, "saw": [names of earlier results]}:
 * "saw" shows the chaining, e.g. ["wordcount"] for "#wordcount #shout". */
static wasmext_verdict shout(wasmext_call *call) {
    const char *answer;
    uint32_t n;
    if (!field_str(&call->data, "answer", &answer, &n))
        return wasmext_fail(call, WASMEXT_E_INVALID, "output_extension data needs a string \"answer\"");
    wasmext_write_map(call->out, 2);
    wasmext_write_cstr(call->out, "text");
    write_upper(call->out, answer, n);
    wasmext_write_cstr(call->out, "saw");
    write_previous(call);
    return WASMEXT_VALUE;
}

/* ---- on_input_messages ---------------------------------------------------- */

/* Copy one message to w with its string "content" trimmed; every other key
 * (and a content that is not a string) is copied as it is, in order. An item
 * that is not a map is copied unchanged too. *changed is set when a content
 * lost whitespace. */
static int copy_message(wasmext_reader *r, wasmext_writer *w, bool *changed) {
    uint32_t pairs;
    if (wasmext_read_map(r, &pairs) != WASMEXT_OK) return wasmext_copy_value(r, w);
    wasmext_write_map(w, pairs);
    for (uint32_t i = 0; i < pairs; i++) {
        const char *key, *s;
        uint32_t klen, n;
        int rc = wasmext_read_str(r, &key, &klen);
        if (rc != WASMEXT_OK) return rc;
        wasmext_write_str(w, key, klen);
        wasmext_reader value = *r;
        if (wasmext_str_eq(key, klen, "content") && wasmext_read_str(&value, &s, &n) == WASMEXT_OK) {
            uint32_t a = 0, b = n;
            while (a < b && is_space((unsigned char)s[a])) a++;
            while (b > a && is_space((unsigned char)s[b - 1])) b--;
            if (a != 0 || b != n) *changed = true;
            wasmext_write_str(w, s + a, b - a);
            *r = value;
        } else if ((rc = wasmext_copy_value(r, w)) != WASMEXT_OK) {
            return rc;
        }
    }
    return WASMEXT_OK;
}

/* data: [{"role", "content", ...}, ...] -> the same array, contents trimmed;
 * unchanged when no content had leading or trailing whitespace. */
static wasmext_verdict trim_messages(wasmext_call *call) {
    wasmext_reader r = call->data;
    uint32_t count;
    bool changed = false;
    if (wasmext_read_array(&r, &count) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "on_input_messages expects an array of messages");
    wasmext_write_array(call->out, count);
    for (uint32_t i = 0; i < count; i++)
        if (copy_message(&r, call->out, &changed) != WASMEXT_OK)
            return wasmext_fail(call, WASMEXT_E_INVALID, "a message could not be read");
    return changed ? WASMEXT_VALUE : WASMEXT_UNCHANGED;
}

/* The SDK dispatches on_tag by the data's "tag" and output_extension by its
 * "name" to the first entry whose pattern matches. */
static const wasmext_hook hooks[] = {
    {"on_tag", WASMEXT_PRIORITY_DEFAULT, "upper", upper},
    {"on_tag", WASMEXT_PRIORITY_DEFAULT, "redact*", redact},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "wordcount", wordcount},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "shout", shout},
    WASMEXT_HOOK("on_input_messages", trim_messages),
};

WASMEXT_PLUGIN("text-tags", "0.1.0", hooks);
