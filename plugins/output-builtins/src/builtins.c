/* Reference 003's five built-in output extensions, as one sandboxed plugin.
 *
 *   #json[:minimal|full]    chat_append  the answer with the turn's context
 *   #extract[:numbers|percentages|entities]  silent  labeled numbers with their
 *                                            units ("CPU: 94%"), percentages and
 *                                            UPPER_CASE identifiers (not stop-words)
 *   #decision[:binary|<focus>]  silent   the model decides: a branch key for workflows
 *   #classify               silent       the model picks a category
 *   #summary[:brief|detailed]  chat_append  the model summarises
 *
 * The last three call llm.complete with "json_mode": true (grant "llm") and
 * turn the model's JSON text into the result (the first JSON object in it, so a
 * fenced answer works too); text that is not JSON fails that result alone. */
#include <string.h>

#include <wasmext.h>

/* ---- small helpers --------------------------------------------------------- */

static bool field_str(const wasmext_reader *map, const char *key, const char **s,
                      uint32_t *n) {
    wasmext_reader f;
    return wasmext_map_find(map, key, &f) == WASMEXT_OK &&
           wasmext_read_str(&f, s, n) == WASMEXT_OK;
}

/* key: the raw value of `key` in `map`, or nil. */
static void copy_field(wasmext_writer *w, const wasmext_reader *map, const char *key,
                       const char *as) {
    wasmext_reader f;
    const uint8_t *raw;
    size_t len;
    wasmext_write_cstr(w, as);
    if (wasmext_map_find(map, key, &f) == WASMEXT_OK &&
        wasmext_read_raw(&f, &raw, &len) == WASMEXT_OK)
        wasmext_write_raw(w, raw, len);
    else
        wasmext_write_nil(w);
}

static bool param_is(const wasmext_call *call, const char *want) {
    const char *p;
    uint32_t n;
    return field_str(&call->data, "param", &p, &n) && wasmext_str_eq(p, n, want);
}

static void write_raw_cstr(wasmext_writer *w, const char *s) {
    while (*s) wasmext_write_raw(w, s++, 1);
}

/* ---- #json ------------------------------------------------------------------ */

static wasmext_verdict json_ext(wasmext_call *call) {
    wasmext_reader ctx;
    bool minimal = param_is(call, "minimal"), full = param_is(call, "full");
    if (wasmext_map_find(&call->data, "context", &ctx) != WASMEXT_OK) ctx = call->data;
    static const char *const base[] = {"session_id", "turn_id", "user_id", "provider",
                                       "model", "tokens", "tools_used"};
    static const char *const more[] = {"execution_trace", "child_results", "collected_data"};
    uint32_t pairs = 2 + (minimal ? 0 : 7) + (full ? 3 : 0);
    wasmext_write_map(call->out, pairs);
    copy_field(call->out, &call->data, "query", "query");
    copy_field(call->out, &call->data, "answer", "answer");
    if (!minimal)
        for (int i = 0; i < 7; i++) copy_field(call->out, &ctx, base[i], base[i]);
    if (full)
        for (int i = 0; i < 3; i++) copy_field(call->out, &ctx, more[i], more[i]);
    return WASMEXT_VALUE;
}

/* ---- #extract ----------------------------------------------------------------- */

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
static bool is_word(char c) {
    return is_digit(c) || is_upper(c) || (c >= 'a' && c <= 'z') || c == '_';
}

/* A number at s[i] (digits, ',' between digits, one '.'); its end in *end. */
static double number_at(const char *s, uint32_t n, uint32_t i, uint32_t *end) {
    double value = 0, scale = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (is_digit(c)) {
            if (scale > 0) {
                scale /= 10;
                value += (c - '0') * scale;
            } else {
                value = value * 10 + (c - '0');
            }
        } else if (c == ',' && scale == 0 && i + 1 < n && is_digit(s[i + 1])) {
            continue;
        } else if (c == '.' && scale == 0 && i + 1 < n && is_digit(s[i + 1])) {
            scale = 1;
        } else {
            break;
        }
    }
    *end = i;
    return value;
}

enum { NUMBERS, PERCENTAGES, ENTITIES };
enum { MAX_ITEMS = 256, MAX_LABEL = 64, MAX_UNIT = 16, LABEL_WORDS = 3 };

/* 003's ENTITY_STOPWORDS: upper-case words that are not names of things. */
static const char *const STOPWORDS[] = {
    "THE", "AND", "FOR", "NOT", "BUT", "ARE", "WAS", "YOU", "ALL", "ANY", "YES", "NONE",
    "NULL", "TRUE", "FALSE", "NOTE", "TODO", "FYI", "ASAP", "ETA", "UTC", "GMT",
    "SQL", "API", "LLM", "AI", "JSON", "XML", "YAML", "HTML", "HTTP", "HTTPS", "URL",
    "REST", "CSV", "PDF", "CPU", "GPU", "RAM", "SSD", "HDD", "USD", "EUR", "SELECT",
    "FROM", "WHERE", "INSERT", "UPDATE", "DELETE", "JOIN", "GROUP", "ORDER", "LIMIT",
    "INTO", "VALUES", "CREATE", "TABLE", "DROP", "ALTER", "INDEX", "HAVING", "UNION",
    "DISTINCT", "COUNT", "SUM", "AVG", "MIN", "MAX", "INNER", "OUTER", "LEFT", "RIGHT"};

static bool stopword(const char *s, uint32_t n) {
    for (size_t k = 0; k < sizeof STOPWORDS / sizeof STOPWORDS[0]; k++)
        if (wasmext_str_eq(s, n, STOPWORDS[k])) return true;
    return false;
}

static bool is_letter(char c) { return is_upper(c) || (c >= 'a' && c <= 'z'); }

/* NUMBER_WITH_UNIT: "Label: 94.5%", "Total rows: 1,234 rows". The label is the last
 * words (at most LABEL_WORDS) before the colon, back to punctuation or a line start;
 * the unit is '%' or the letters right after the number (one space allowed). */
typedef struct labeled {
    uint32_t label_at, label_len, unit_at, unit_len, next;
    double value;
} labeled;

static bool labeled_at(const char *s, uint32_t n, uint32_t colon, labeled *out) {
    uint32_t j = colon + 1;
    while (j < n && (s[j] == ' ' || s[j] == '\t')) j++;
    if (j >= n || !is_digit(s[j])) return false;
    uint32_t end;
    out->value = number_at(s, n, j, &end);
    out->next = end;
    out->unit_at = end;
    out->unit_len = 0;
    if (end < n && s[end] == '%') {
        out->unit_len = 1;
        out->next = end + 1;
    } else {
        uint32_t u = end < n && s[end] == ' ' ? end + 1 : end, k = u;
        while (k < n && is_letter(s[k]) && k - u <= MAX_UNIT) k++;
        if (k > u && k - u <= MAX_UNIT && (k >= n || !is_word(s[k]))) {
            out->unit_at = u;
            out->unit_len = k - u;
            out->next = k;
        }
    }
    uint32_t stop = colon, words = 0, begin;
    while (stop > 0 && s[stop - 1] == ' ') stop--;
    uint32_t i = stop;
    while (i > 0 && colon - i < MAX_LABEL) {
        char c = s[i - 1];
        if (c == ' ') {
            if (++words >= LABEL_WORDS) break;
        } else if (!is_word(c) && c != '-' && c != '/') {
            break;
        }
        i--;
    }
    while (i < stop && s[i] == ' ') i++;
    begin = i;
    bool letters = false;
    for (uint32_t k = begin; k < stop; k++) letters = letters || is_letter(s[k]);
    if (!letters) return false;
    out->label_at = begin;
    out->label_len = stop - begin;
    return true;
}

static void write_labeled(wasmext_writer *w, const char *s, const labeled *l) {
    wasmext_write_map(w, 3);
    wasmext_write_cstr(w, "label");
    wasmext_write_str(w, s + l->label_at, l->label_len);
    wasmext_write_cstr(w, "value");
    wasmext_write_double(w, l->value);
    wasmext_write_cstr(w, "unit");
    if (l->unit_len)
        wasmext_write_str(w, s + l->unit_at, l->unit_len);
    else
        wasmext_write_nil(w);
}

/* How many items of `kind` (at most MAX_ITEMS); with w, also writes them. */
static uint32_t scan(const char *s, uint32_t n, int kind, wasmext_writer *w) {
    uint32_t count = 0;
    uint32_t seen_at[MAX_ITEMS], seen_len[MAX_ITEMS]; /* entities already listed */
    for (uint32_t i = 0; i < n && count < MAX_ITEMS;) {
        bool starts = i == 0 || !is_word(s[i - 1]);
        if (kind == NUMBERS && s[i] == ':') {
            labeled l;
            if (labeled_at(s, n, i, &l)) {
                count++;
                if (w) write_labeled(w, s, &l);
                i = l.next;
            } else {
                i++;
            }
        } else if (kind == PERCENTAGES && is_digit(s[i]) && starts) {
            uint32_t end;
            double v = number_at(s, n, i, &end);
            if (end < n && s[end] == '%') {
                count++;
                if (w) wasmext_write_double(w, v);
            }
            i = end;
        } else if (kind == ENTITIES && is_upper(s[i]) && starts) {
            uint32_t end = i;
            bool upper_only = true;
            while (end < n && is_word(s[end])) {
                if (s[end] >= 'a' && s[end] <= 'z') upper_only = false;
                end++;
            }
            uint32_t len = end - i;
            bool fresh = upper_only && len >= 3 && len <= 64 && !stopword(s + i, len);
            for (uint32_t k = 0; fresh && k < count; k++)
                fresh = !(seen_len[k] == len && memcmp(s + seen_at[k], s + i, len) == 0);
            if (fresh) {
                seen_at[count] = i;
                seen_len[count] = len;
                count++;
                if (w) wasmext_write_str(w, s + i, len);
            }
            i = end;
        } else {
            i++;
        }
    }
    return count;
}

static void write_kind(wasmext_writer *w, const char *s, uint32_t n, int kind) {
    static const char *const keys[] = {"numbers", "percentages", "entities"};
    wasmext_write_cstr(w, keys[kind]);
    wasmext_write_array(w, scan(s, n, kind, NULL));
    (void)scan(s, n, kind, w);
}

static wasmext_verdict extract(wasmext_call *call) {
    const char *answer;
    uint32_t n;
    if (!field_str(&call->data, "answer", &answer, &n))
        return wasmext_fail(call, WASMEXT_E_INVALID, "output_extension data needs an answer");
    static const char *const params[] = {"numbers", "percentages", "entities"};
    for (int k = 0; k < 3; k++)
        if (param_is(call, params[k])) {
            wasmext_write_map(call->out, 1);
            write_kind(call->out, answer, n, k);
            return WASMEXT_VALUE;
        }
    wasmext_write_map(call->out, 4);
    for (int k = 0; k < 3; k++) write_kind(call->out, answer, n, k);
    wasmext_write_cstr(call->out, "source_length");
    wasmext_write_uint(call->out, n);
    return WASMEXT_VALUE;
}

/* ---- JSON text -> MessagePack (the model's answers) ----------------------------- */

typedef struct json {
    const char *s;
    uint32_t n, i;
    int depth;
} json;

static void ws(json *j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\n' || j->s[j->i] == '\r' ||
                           j->s[j->i] == '\t'))
        j->i++;
}

static int hex(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void utf8(wasmext_writer *w, uint32_t cp) {
    uint8_t b[4];
    size_t len;
    if (cp < 0x80) { b[0] = (uint8_t)cp; len = 1; }
    else if (cp < 0x800) { b[0] = 0xC0 | (cp >> 6); b[1] = 0x80 | (cp & 63); len = 2; }
    else if (cp < 0x10000) {
        b[0] = 0xE0 | (cp >> 12); b[1] = 0x80 | ((cp >> 6) & 63); b[2] = 0x80 | (cp & 63);
        len = 3;
    } else {
        b[0] = 0xF0 | (cp >> 18); b[1] = 0x80 | ((cp >> 12) & 63);
        b[2] = 0x80 | ((cp >> 6) & 63); b[3] = 0x80 | (cp & 63); len = 4;
    }
    wasmext_write_raw(w, b, len);
}

/* A JSON string at j (the opening quote) written as a MessagePack str. */
static bool string(json *j, wasmext_writer *out) {
    wasmext_writer text = WASMEXT_WRITER_INIT;
    j->i++;
    while (j->i < j->n && j->s[j->i] != '"') {
        char c = j->s[j->i++];
        if (c != '\\') { wasmext_write_raw(&text, &c, 1); continue; }
        if (j->i >= j->n) break;
        char e = j->s[j->i++];
        const char *simple = e == 'n' ? "\n" : e == 't' ? "\t" : e == 'r' ? "\r" :
                             e == 'b' ? "\b" : e == 'f' ? "\f" : NULL;
        if (simple) wasmext_write_raw(&text, simple, 1);
        else if (e == 'u' && j->i + 4 <= j->n) {
            uint32_t cp = 0;
            for (int k = 0; k < 4; k++) {
                int h = hex(j->s[j->i++]);
                if (h < 0) { wasmext_writer_free(&text); return false; }
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp >= 0xD800 && cp < 0xDC00 && j->i + 6 <= j->n && j->s[j->i] == '\\' &&
                j->s[j->i + 1] == 'u') {
                uint32_t lo = 0;
                bool good = true;
                for (int k = 2; k < 6; k++) {
                    int h = hex(j->s[j->i + k]);
                    good = good && h >= 0;
                    lo = lo * 16 + (uint32_t)(h < 0 ? 0 : h);
                }
                if (good && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    j->i += 6;
                }
            }
            utf8(&text, cp >= 0xD800 && cp < 0xE000 ? 0xFFFD : cp);
        } else wasmext_write_raw(&text, &e, 1);
    }
    if (j->i >= j->n || wasmext_writer_error(&text) != WASMEXT_OK) {
        wasmext_writer_free(&text);
        return false;
    }
    j->i++;
    wasmext_write_str(out, (const char *)text.buf, text.len);
    wasmext_writer_free(&text);
    return true;
}

static bool value(json *j, wasmext_writer *out);

/* An object or array: items written to a scratch writer, then the header. */
static bool container(json *j, wasmext_writer *out, bool object) {
    wasmext_writer items = WASMEXT_WRITER_INIT;
    uint32_t count = 0;
    char close = object ? '}' : ']';
    if (++j->depth > 32) return false;
    j->i++;
    ws(j);
    bool ok = true;
    if (j->i < j->n && j->s[j->i] == close) j->i++;
    else
        for (;;) {
            ws(j);
            if (object) {
                if (j->i >= j->n || j->s[j->i] != '"' || !string(j, &items)) { ok = false; break; }
                ws(j);
                if (j->i >= j->n || j->s[j->i] != ':') { ok = false; break; }
                j->i++;
            }
            if (!value(j, &items)) { ok = false; break; }
            count++;
            ws(j);
            if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
            if (j->i < j->n && j->s[j->i] == close) { j->i++; break; }
            ok = false;
            break;
        }
    j->depth--;
    if (ok) {
        if (object) wasmext_write_map(out, count);
        else wasmext_write_array(out, count);
        wasmext_write_raw(out, items.buf, items.len);
    }
    wasmext_writer_free(&items);
    return ok;
}

static bool literal(json *j, const char *word) {
    uint32_t k = 0;
    while (word[k]) {
        if (j->i + k >= j->n || j->s[j->i + k] != word[k]) return false;
        k++;
    }
    j->i += k;
    return true;
}

static bool value(json *j, wasmext_writer *out) {
    ws(j);
    if (j->i >= j->n) return false;
    char c = j->s[j->i];
    if (c == '{' || c == '[') return container(j, out, c == '{');
    if (c == '"') return string(j, out);
    if (literal(j, "true")) { wasmext_write_bool(out, true); return true; }
    if (literal(j, "false")) { wasmext_write_bool(out, false); return true; }
    if (literal(j, "null")) { wasmext_write_nil(out); return true; }
    bool negative = c == '-';
    if (negative) j->i++;
    if (j->i >= j->n || !is_digit(j->s[j->i])) return false;
    uint32_t end;
    double v = number_at(j->s, j->n, j->i, &end);
    bool fraction = false;
    for (uint32_t k = j->i; k < end; k++) fraction = fraction || j->s[k] == '.';
    j->i = end;
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {  /* rare: drop it */
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        while (j->i < j->n && is_digit(j->s[j->i])) j->i++;
        fraction = true;
    }
    if (negative) v = -v;
    if (!fraction && v > -9e15 && v < 9e15) wasmext_write_int(out, (int64_t)v);
    else wasmext_write_double(out, v);
    return true;
}

/* The first JSON object in `text` (fences and prose around it are skipped). */
static bool first_object(const char *text, uint32_t n, wasmext_writer *out) {
    for (uint32_t start = 0; start < n; start++) {
        if (text[start] != '{') continue;
        json j = {text, n, start, 0};
        wasmext_writer one = WASMEXT_WRITER_INIT;
        bool ok = value(&j, &one) && wasmext_writer_error(&one) == WASMEXT_OK;
        if (ok) wasmext_write_raw(out, one.buf, one.len);
        wasmext_writer_free(&one);
        if (ok) return true;
    }
    return false;
}

/* ---- the model's extensions --------------------------------------------------- */

/* llm.complete {messages: [system, user], max_tokens, temperature: 0, json_mode: true} */
static wasmext_verdict ask_model(wasmext_call *call, const char *system, const char *task) {
    const char *answer;
    uint32_t n;
    if (!field_str(&call->data, "answer", &answer, &n))
        return wasmext_fail(call, WASMEXT_E_INVALID, "output_extension data needs an answer");
    wasmext_writer req = WASMEXT_WRITER_INIT;
    wasmext_write_map(&req, 5);
    wasmext_write_cstr(&req, "op");
    wasmext_write_cstr(&req, WASMEXT_OP_LLM_COMPLETE);
    wasmext_write_cstr(&req, "messages");
    wasmext_write_array(&req, 2);
    wasmext_write_map(&req, 2);
    wasmext_write_cstr(&req, "role");
    wasmext_write_cstr(&req, "system");
    wasmext_write_cstr(&req, "content");
    wasmext_write_cstr(&req, system);
    wasmext_write_map(&req, 2);
    wasmext_write_cstr(&req, "role");
    wasmext_write_cstr(&req, "user");
    wasmext_write_cstr(&req, "content");
    wasmext_writer prompt = WASMEXT_WRITER_INIT;
    write_raw_cstr(&prompt, task);
    wasmext_write_raw(&prompt, "\n\n", 2);
    wasmext_write_raw(&prompt, answer, n);
    wasmext_write_str(&req, (const char *)prompt.buf, prompt.len);
    wasmext_writer_free(&prompt);
    wasmext_write_cstr(&req, "max_tokens");
    wasmext_write_int(&req, 400);
    wasmext_write_cstr(&req, "temperature");
    wasmext_write_double(&req, 0.0);
    wasmext_write_cstr(&req, "json_mode");
    wasmext_write_bool(&req, true);
    if (wasmext_writer_error(&req) != WASMEXT_OK) {
        wasmext_writer_free(&req);
        return wasmext_fail(call, WASMEXT_E_INTERNAL, "out of memory");
    }
    wasmext_answer a;
    int rc = wasmext_host_call(req.buf, req.len, &a);
    wasmext_writer_free(&req);
    if (rc != WASMEXT_OK) {
        wasmext_verdict failed = wasmext_fail_answer(call, &a);
        wasmext_answer_free(&a);
        return failed;
    }
    const char *text;
    uint32_t len;
    bool parsed = field_str(&a.value, "text", &text, &len) &&
                  first_object(text, len, call->out);
    wasmext_answer_free(&a);
    if (!parsed)
        return wasmext_fail(call, WASMEXT_E_INVALID, "the model's answer holds no JSON object");
    return WASMEXT_VALUE;
}

static wasmext_verdict decision(wasmext_call *call) {
    if (param_is(call, "binary"))
        return ask_model(call,
            "You turn an assistant's answer into a yes/no workflow decision. Reply with one "
            "JSON object: {\"result\": \"yes\"|\"no\", \"action_recommended\": bool, "
            "\"branch_key\": \"yes\"|\"no\", \"reasoning\": string}.",
            "Decide yes or no for this answer:");
    return ask_model(call,
        "You turn an assistant's answer into a workflow branch. Reply with one JSON object: "
        "{\"result\": \"threshold_exceeded\"|\"approaching_threshold\"|\"action_required\"|"
        "\"nominal\", \"severity\": \"critical\"|\"warning\"|\"info\"|\"ok\", "
        "\"confidence\": number, \"action_recommended\": bool, \"branch_key\": "
        "\"<result>_<severity>\", \"reasoning\": string}.",
        "Decide the branch for this answer:");
}

static wasmext_verdict classify(wasmext_call *call) {
    return ask_model(call,
        "You classify an assistant's answer into one of: alert, performance, data_quality, "
        "capacity, security, data_report, informational. Reply with one JSON object: "
        "{\"primary_category\": string, \"confidence\": number, \"all_categories\": "
        "{category: score}, \"branch_key\": string, \"reasoning\": string}.",
        "Classify this answer:");
}

static wasmext_verdict summary(wasmext_call *call) {
    if (param_is(call, "detailed"))
        return ask_model(call,
            "You write an executive summary of an assistant's answer. Reply with one JSON "
            "object: {\"summary\": string, \"key_points\": [string], \"sections\": "
            "{title: text}, \"action_items\": [string], \"data_highlights\": [string]}.",
            "Summarise this answer in detail:");
    return ask_model(call,
        "You write an executive summary of an assistant's answer. Reply with one JSON object: "
        "{\"summary\": string, \"key_points\": [string], \"action_items\": [string]}.",
        "Summarise this answer briefly:");
}

/* ---- registration -------------------------------------------------------------- */

/* schema: the extension's output_schema as JSON text, NULL for none. */
static void declare(wasmext_writer *w, const char *name, const char *target,
                    const char *const *params, uint32_t count, const char *schema) {
    wasmext_write_map(w, (count ? 4 : 3) + (schema ? 1 : 0));
    if (schema) {
        wasmext_write_cstr(w, "output_schema");
        (void)first_object(schema, (uint32_t)strlen(schema), w);
    }
    wasmext_write_cstr(w, "name");
    wasmext_write_cstr(w, name);
    wasmext_write_cstr(w, "output_target");
    wasmext_write_cstr(w, target);
    wasmext_write_cstr(w, "content_type");
    wasmext_write_cstr(w, "application/json");
    if (count) {
        wasmext_write_cstr(w, "allowed_params");
        wasmext_write_array(w, count);
        for (uint32_t i = 0; i < count; i++) wasmext_write_cstr(w, params[i]);
    }
}

/* 003's #extract result, checked by the host against every result (output_schema). */
static const char EXTRACT_SCHEMA[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
    "\"numbers\": {\"type\": \"array\", \"items\": {\"type\": \"object\", "
    "\"required\": [\"label\", \"value\", \"unit\"], \"properties\": {"
    "\"label\": {\"type\": \"string\"}, \"value\": {\"type\": \"number\"}, "
    "\"unit\": {\"type\": [\"string\", \"null\"]}}}}, "
    "\"percentages\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}}, "
    "\"entities\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}, "
    "\"source_length\": {\"type\": \"integer\", \"minimum\": 0}}}";

static uint32_t extra(wasmext_writer *w) {
    static const char *const json_params[] = {"minimal", "full"};
    static const char *const extract_params[] = {"numbers", "percentages", "entities"};
    static const char *const summary_params[] = {"brief", "detailed"};
    wasmext_write_cstr(w, "output_extensions");
    wasmext_write_array(w, 5);
    declare(w, "json", "chat_append", json_params, 2, NULL);
    declare(w, "extract", "silent", extract_params, 3, EXTRACT_SCHEMA);
    declare(w, "decision", "silent", NULL, 0, NULL);  /* binary, or any severity focus */
    declare(w, "classify", "silent", NULL, 0, NULL);
    declare(w, "summary", "chat_append", summary_params, 2, NULL);
    return 1;
}

static const wasmext_hook hooks[] = {
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "json", json_ext},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "extract", extract},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "decision", decision},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "classify", classify},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "summary", summary},
};

WASMEXT_PLUGIN_EX("output-builtins", "0.1.0", hooks, extra);
