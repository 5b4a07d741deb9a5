/* text-tags: one plugin showing tag handlers, output extensions and an input
 * transform. Every handler reads what docs/hooks.md says it gets. */
#include <string.h>
#include <wasmext.h>

static int field_str(const wasmext_reader *map, const char *key, const char **s, uint32_t *n) {
    wasmext_reader v;
    if (wasmext_map_find(map, key, &v) != WASMEXT_OK) return WASMEXT_ERR_NOT_FOUND;
    return wasmext_read_str(&v, s, n);
}

static char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 32) : c; }

/* Write s uppercased (ASCII letters only: other bytes, UTF-8 included, pass). */
static void write_upper(wasmext_writer *w, const char *s, uint32_t n) {
    wasmext_writer tmp = WASMEXT_WRITER_INIT;
    wasmext_write_raw(&tmp, s, n);
    for (size_t i = 0; i < tmp.len; i++) tmp.buf[i] = (uint8_t)ascii_upper((char)tmp.buf[i]);
    wasmext_write_str(w, (const char *)tmp.buf, tmp.len);
    wasmext_writer_free(&tmp);
}

/* <upper>text</upper> -> TEXT */
static wasmext_verdict upper(wasmext_call *call) {
    const char *content;
    uint32_t n;
    if (field_str(&call->data, "content", &content, &n) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "on_tag data needs content");
    write_upper(call->out, content, n);
    return WASMEXT_VALUE;
}

/* <redact...>anything</redact...> -> [REDACTED] */
static wasmext_verdict redact(wasmext_call *call) {
    return wasmext_return_str(call, "[REDACTED]", 10);
}

/* Words: runs of non-space bytes; characters: UTF-8 code points. */
static void count(const char *s, uint32_t n, uint32_t *words, uint32_t *chars) {
    bool in_word = false;
    *words = *chars = 0;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (!space && !in_word) (*words)++;
        in_word = !space;
        if ((c & 0xC0) != 0x80) (*chars)++;
    }
}

/* Names of the earlier extension results, as an array. */
static void write_previous(wasmext_call *call) {
    wasmext_reader prev, it;
    uint32_t pairs = 0;
    if (wasmext_map_find(&call->data, "previous", &prev) != WASMEXT_OK ||
        wasmext_read_map(&prev, &pairs) != WASMEXT_OK) pairs = 0;
    wasmext_write_array(call->out, pairs);
    it = prev;
    for (uint32_t i = 0; i < pairs; i++) {
        const char *name;
        uint32_t len;
        if (wasmext_read_str(&it, &name, &len) != WASMEXT_OK) name = "", len = 0;
        wasmext_write_str(call->out, name, len);
        wasmext_skip(&it);
    }
}

/* #wordcount[:brief] */
static wasmext_verdict wordcount(wasmext_call *call) {
    const char *answer, *param;
    uint32_t n, plen, words, chars;
    if (field_str(&call->data, "answer", &answer, &n) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "output_extension data needs answer");
    count(answer, n, &words, &chars);
    if (field_str(&call->data, "param", &param, &plen) == WASMEXT_OK &&
        wasmext_str_eq(param, plen, "brief")) {
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

/* #shout: the answer uppercased, and which results came before. */
static wasmext_verdict shout(wasmext_call *call) {
    const char *answer;
    uint32_t n;
    if (field_str(&call->data, "answer", &answer, &n) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "output_extension data needs answer");
    wasmext_write_map(call->out, 2);
    wasmext_write_cstr(call->out, "text");
    write_upper(call->out, answer, n);
    wasmext_write_cstr(call->out, "saw");
    write_previous(call);
    return WASMEXT_VALUE;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Copy one message map, trimming its "content"; *changed is set if it changed. */
static int copy_message(wasmext_reader *r, wasmext_writer *w, bool *changed) {
    uint32_t pairs;
    int rc = wasmext_read_map(r, &pairs);
    if (rc != WASMEXT_OK) return rc;
    wasmext_write_map(w, pairs);
    for (uint32_t i = 0; i < pairs && rc == WASMEXT_OK; i++) {
        const char *key, *s;
        uint32_t klen, n;
        if ((rc = wasmext_read_str(r, &key, &klen)) != WASMEXT_OK) return rc;
        wasmext_write_str(w, key, klen);
        wasmext_reader peek = *r;
        if (wasmext_str_eq(key, klen, "content") && wasmext_read_str(&peek, &s, &n) == WASMEXT_OK) {
            uint32_t a = 0, b = n;
            while (a < b && is_space(s[a])) a++;
            while (b > a && is_space(s[b - 1])) b--;
            if (a != 0 || b != n) *changed = true;
            wasmext_write_str(w, s + a, b - a);
            *r = peek;
        } else {
            rc = wasmext_copy_value(r, w);
        }
    }
    return rc;
}

/* on_input_messages: trim every message's content, keep everything else. */
static wasmext_verdict trim_messages(wasmext_call *call) {
    wasmext_reader r = call->data;
    uint32_t count_msgs;
    bool changed = false;
    if (wasmext_read_array(&r, &count_msgs) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "on_input_messages expects an array");
    wasmext_write_array(call->out, count_msgs);
    for (uint32_t i = 0; i < count_msgs; i++)
        if (copy_message(&r, call->out, &changed) != WASMEXT_OK)
            return wasmext_fail(call, WASMEXT_E_INVALID, "messages must be maps");
    return changed ? WASMEXT_VALUE : WASMEXT_UNCHANGED;
}

static const wasmext_hook hooks[] = {
    {"on_tag", WASMEXT_PRIORITY_DEFAULT, "upper", upper},
    {"on_tag", WASMEXT_PRIORITY_DEFAULT, "redact*", redact},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "wordcount", wordcount},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "shout", shout},
    WASMEXT_HOOK("on_input_messages", trim_messages),
};

WASMEXT_PLUGIN("text-tags", "0.1.0", hooks);
