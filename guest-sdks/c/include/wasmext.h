/* wasmext C SDK: the safe layer and the plugin interface.
 *
 * A plugin author includes this header, writes handler functions and one
 * WASMEXT_PLUGIN(...) line; src/plugin.c defines the ABI exports and
 * dispatches to the handlers. See README.md for a walk-through.
 *
 * Conventions: functions returning int return WASMEXT_OK (0) or a negative
 * WASMEXT_ERR_*. Strings read from MessagePack are (pointer, length) views,
 * NOT NUL-terminated, valid as long as the buffer they were read from.
 */
#ifndef WASMEXT_H
#define WASMEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wasmext_abi.h"
#include "wasmext_raw.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------ */

enum {
    WASMEXT_OK = 0,
    WASMEXT_ERR_TRUNCATED = -1, /* a value runs past the end of its buffer */
    WASMEXT_ERR_TYPE = -2,      /* the next value is not of the type asked for */
    WASMEXT_ERR_RANGE = -3,     /* a number or length does not fit the target */
    WASMEXT_ERR_DEPTH = -4,     /* nesting deeper than WASMEXT_MAX_DEPTH */
    WASMEXT_ERR_MALFORMED = -5, /* ext type, byte 0xc1, non-string key, trailing
                                   bytes, bad UTF-8 (when checked) */
    WASMEXT_ERR_NOMEM = -6,     /* malloc/realloc failed */
    WASMEXT_ERR_NOT_FOUND = -7, /* map key absent */
    WASMEXT_ERR_HOST = -8       /* a host_call answered ok=false (see the answer) */
};

/* Containers may nest this deep (the host's max_msgpack_depth): 64 nested
 * arrays around a scalar are accepted, 65 are not. */
#define WASMEXT_MAX_DEPTH ((int)WASMEXT_LIMIT_MAX_MSGPACK_DEPTH)

/* ---- MessagePack reader ------------------------------------------------ */

typedef enum wasmext_type {
    WASMEXT_TYPE_NIL,
    WASMEXT_TYPE_BOOL,
    WASMEXT_TYPE_INT,   /* any integer that fits int64_t (as.i) */
    WASMEXT_TYPE_UINT,  /* an unsigned integer above INT64_MAX (as.u) */
    WASMEXT_TYPE_FLOAT, /* float32 or float64, widened (as.f) */
    WASMEXT_TYPE_STR,
    WASMEXT_TYPE_BIN,
    WASMEXT_TYPE_ARRAY, /* as.count items follow */
    WASMEXT_TYPE_MAP    /* as.count key/value pairs follow */
} wasmext_type;

typedef struct wasmext_value {
    wasmext_type type;
    union {
        bool b;
        int64_t i;
        uint64_t u;
        double f;
        struct { const char *ptr; uint32_t len; } str;
        struct { const uint8_t *ptr; uint32_t len; } bin;
        uint32_t count;
    } as;
} wasmext_value;

/* A cursor over a byte buffer it does not own. Copy it freely: a copy is an
 * independent cursor. Every read checks bounds; on error pos is unchanged. */
typedef struct wasmext_reader {
    const uint8_t *buf;
    size_t len;
    size_t pos;
} wasmext_reader;

void wasmext_reader_init(wasmext_reader *r, const void *buf, size_t len);
bool wasmext_reader_at_end(const wasmext_reader *r);

/* One token: scalars and str/bin whole, containers as header only (their
 * items follow). Array/map counts larger than the bytes left are refused. */
int wasmext_peek(const wasmext_reader *r, wasmext_value *out);
int wasmext_read(wasmext_reader *r, wasmext_value *out);

/* Typed reads; WASMEXT_ERR_TYPE leaves the cursor where it was. */
int wasmext_read_nil(wasmext_reader *r);
int wasmext_read_bool(wasmext_reader *r, bool *out);
int wasmext_read_int(wasmext_reader *r, int64_t *out);   /* RANGE above INT64_MAX */
int wasmext_read_uint(wasmext_reader *r, uint64_t *out); /* RANGE if negative */
int wasmext_read_double(wasmext_reader *r, double *out); /* floats and ints */
int wasmext_read_str(wasmext_reader *r, const char **s, uint32_t *len);
int wasmext_read_bin(wasmext_reader *r, const uint8_t **p, uint32_t *len);
int wasmext_read_array(wasmext_reader *r, uint32_t *count);
int wasmext_read_map(wasmext_reader *r, uint32_t *count);

/* Skip one complete value (any nesting up to WASMEXT_MAX_DEPTH). */
int wasmext_skip(wasmext_reader *r);
/* Skip one complete value and return its encoded bytes. */
int wasmext_read_raw(wasmext_reader *r, const uint8_t **p, size_t *len);

/* With r positioned on a map, point *value at the value of `key` (r itself
 * does not move). WASMEXT_ERR_NOT_FOUND if absent, TYPE if r is not a map. */
int wasmext_map_find(const wasmext_reader *r, const char *key, wasmext_reader *value);

/* The whole buffer is exactly one well-formed value: in bounds, depth within
 * WASMEXT_MAX_DEPTH, no ext types, string map keys, no trailing bytes.
 * The SDK runs this on every request and answer before using it. */
int wasmext_validate(const void *buf, size_t len);
/* The same, and every string is UTF-8. The SDK does not run this on what the
 * host sends (the host only ever encodes valid text, and checking costs fuel
 * per byte); use it on bytes of other origin. */
int wasmext_validate_utf8(const void *buf, size_t len);
bool wasmext_utf8_valid(const void *s, size_t len);

/* (s, len) equals the NUL-terminated `cstr`. */
bool wasmext_str_eq(const char *s, size_t len, const char *cstr);

/* ---- MessagePack writer ------------------------------------------------ */

/* A growable buffer. Errors are sticky: after a failed write every later
 * write is a no-op and wasmext_writer_error() reports the first error, so
 * code can write a whole value and check once. Zero-initialise to start. */
typedef struct wasmext_writer {
    uint8_t *buf;
    size_t len;
    size_t cap;
    int err;
} wasmext_writer;

#define WASMEXT_WRITER_INIT {NULL, 0, 0, 0}

void wasmext_writer_reset(wasmext_writer *w); /* empty it, keep the memory */

/* Re-encode the value at r token by token (advancing r): a decoded copy, not
 * a byte copy, so the result is canonical. Depth is bounded by
 * WASMEXT_MAX_DEPTH; returns the first reader or writer error. */
int wasmext_copy_value(wasmext_reader *r, wasmext_writer *w);
void wasmext_writer_free(wasmext_writer *w);
int wasmext_writer_error(const wasmext_writer *w);

/* All integers use the smallest encoding (abi/vectors/msgpack.json). */
void wasmext_write_nil(wasmext_writer *w);
void wasmext_write_bool(wasmext_writer *w, bool v);
void wasmext_write_int(wasmext_writer *w, int64_t v);
void wasmext_write_uint(wasmext_writer *w, uint64_t v);
void wasmext_write_double(wasmext_writer *w, double v); /* always float64 */
void wasmext_write_str(wasmext_writer *w, const char *s, size_t len);
void wasmext_write_cstr(wasmext_writer *w, const char *s);
void wasmext_write_bin(wasmext_writer *w, const void *p, size_t len);
void wasmext_write_array(wasmext_writer *w, uint32_t count); /* then count values */
void wasmext_write_map(wasmext_writer *w, uint32_t count);   /* then count pairs */
/* Append bytes as they are: an already-encoded value, or text when the
 * writer is used as a plain byte buffer. */
void wasmext_write_raw(wasmext_writer *w, const void *p, size_t len);

/* ---- host services (wasm only) ---------------------------------------- */

/* A host_call answer. The SDK owns `buf` (allocated by the host through
 * wasmext_alloc) until wasmext_answer_free(), which every path must call;
 * calling it twice, or on a zeroed answer, is harmless. */
typedef struct wasmext_answer {
    bool ok;
    wasmext_reader value; /* on ok: the "value" (a nil when absent) */
    const char *code;     /* on !ok: error.code, e.g. WASMEXT_E_NOT_FOUND */
    uint32_t code_len;
    const char *message; /* on !ok: error.message ("" when absent) */
    uint32_t message_len;
    uint8_t *buf; /* the raw answer map, valid until freed */
    size_t buf_len;
} wasmext_answer;

/* Send an encoded request map ({"op": ..., args}). Returns WASMEXT_OK when the
 * host answered ok=true, WASMEXT_ERR_HOST otherwise; a missing or malformed
 * answer becomes ok=false with code "internal". `out` is always filled. */
int wasmext_host_call(const void *request, size_t len, wasmext_answer *out);
void wasmext_answer_free(wasmext_answer *a);
/* Does a failed answer carry this error code (WASMEXT_E_*)? */
bool wasmext_answer_is(const wasmext_answer *a, const char *code);

/* config.get: key NULL asks for the map of all non-sensitive settings. */
int wasmext_config_get(const char *key, wasmext_answer *out);
/* secret.get: needs the "secrets" capability. */
int wasmext_secret_get(const char *key, wasmext_answer *out);

/* Ops of ABI minor 1 (src/world.c). Each answers `unsupported` locally when
 * the host's minor is below 1. Answers as for wasmext_host_call.
 * http.fetch: method NULL = "GET"; headers_map NULL or one encoded MessagePack
 * map of strings; body NULL = none. Needs "http" and "http:<host>" grants. */
int wasmext_http_fetch(const char *method, const char *url, const void *headers_map,
                       size_t headers_len, const void *body, size_t body_len,
                       wasmext_answer *out);
/* llm.complete with a user prompt (system NULL = none); model NULL = the
 * host's; max_tokens <= 0 and temperature < 0 leave them to the host. */
int wasmext_llm_complete(const char *system, const char *prompt, const char *model,
                         int max_tokens, double temperature, wasmext_answer *out);
/* The same in JSON mode (reference 003's call_llm(json_mode=True)): the model is
 * asked for a JSON object ("response_format": {"type": "json_object"}). */
int wasmext_llm_complete_json(const char *system, const char *prompt, const char *model,
                              int max_tokens, double temperature, wasmext_answer *out);
/* agents.request / agents.send: input is one encoded MessagePack value;
 * timeout_ms <= 0 = the host's default (15 s). Turn and step middleware only. */
int wasmext_agents_request(const char *agent, const void *input, size_t input_len,
                           int timeout_ms, wasmext_answer *out);
int wasmext_agents_send(const char *agent, const void *input, size_t input_len,
                        wasmext_answer *out);

/* state.* (needs "state"). scope NULL = "session", the default in every SDK
 * and the host; "plugin" shares a value across the plugin's sessions (a call
 * outside a session may use only that). A missing key answers
 * WASMEXT_E_NOT_FOUND. state.set: value is one encoded MessagePack value;
 * ttl_seconds <= 0 = the host's TTL. state.keys: prefix NULL = all keys; the
 * answer's value is an array of strings. */
int wasmext_state_get(const char *key, const char *scope, wasmext_answer *out);
int wasmext_state_set(const char *key, const void *value, size_t value_len, const char *scope,
                      int ttl_seconds, wasmext_answer *out);
/* state.set of one string value (session scope unless scope names another). */
int wasmext_state_set_str(const char *key, const char *value, const char *scope,
                          wasmext_answer *out);
int wasmext_state_delete(const char *key, const char *scope, wasmext_answer *out);
int wasmext_state_keys(const char *prefix, const char *scope, wasmext_answer *out);
/* event.emit (needs "events" and "emit:<pattern>"): payload is one encoded
 * MessagePack value, NULL for nil. The answer's value is how many subscribers
 * it reached. */
int wasmext_emit(const char *topic, const void *payload, size_t payload_len,
                 wasmext_answer *out);

/* tool.register (ABI minor 2; `unsupported` locally below it): add or replace one
 * of this plugin's own tools after load, served by its on_tool hook under the name
 * `name`. description NULL = none; input_schema NULL = {"type": "object"}, else
 * one encoded MessagePack map. On ok the value is {name: "<plugin>__<name>",
 * replaced: bool}; a broken name or schema is `invalid`, a cap `limit`. */
int wasmext_tool_register(const char *name, const char *description,
                          const void *input_schema, size_t schema_len, wasmext_answer *out);

/* Direct log through the `log` import (no formatting: pass finished text). */
void wasmext_log(int level, const char *text);
void wasmext_log_n(int level, const char *text, size_t len);

/* From the registration request: the host's ABI minor and the plugin id. */
int wasmext_host_abi_minor(void);
const char *wasmext_plugin_id(void);

/* ---- plugin interface -------------------------------------------------- */

/* What a handler tells the SDK to answer. */
typedef enum wasmext_verdict {
    WASMEXT_VALUE,     /* {"ok":true,"value":<the one value written to out>} */
    WASMEXT_UNCHANGED, /* {"ok":true}: pass the input on; out is ignored */
    WASMEXT_STOP,      /* like VALUE (value optional) plus "stop": true */
    WASMEXT_FAILED     /* only as returned by wasmext_fail*() */
} wasmext_verdict;

typedef struct wasmext_call {
    const char *hook; /* the hook name (not NUL-terminated) */
    uint32_t hook_len;
    wasmext_reader data; /* on the request's "data" (nil when absent) */
    wasmext_reader meta; /* on the request's "meta" (nil when absent) */
    wasmext_writer *out; /* write the result value here; never reset it */
    size_t out_start;    /* SDK private: where the value (or error) begins/ends */
    bool failed;         /* SDK private: wasmext_fail wrote the response */
} wasmext_call;

typedef wasmext_verdict (*wasmext_handler)(wasmext_call *call);

#define WASMEXT_PRIORITY_DEFAULT (-1) /* leave "priority" out of the registration */

typedef struct wasmext_hook {
    const char *name;
    int priority;            /* 0..100, or WASMEXT_PRIORITY_DEFAULT */
    const char *pattern;     /* on_tag / output_extension: an exact name or a
                                prefix ending in '*', NULL for none; calls go to
                                the first same-named entry whose pattern
                                matches the data's "tag" (or "name") */
    wasmext_handler handler; /* NULL: registered, always answers unchanged */
} wasmext_hook;

#define WASMEXT_HOOK(name, fn) {(name), WASMEXT_PRIORITY_DEFAULT, NULL, (fn)}
#define WASMEXT_HOOK_PRIO(name, prio, fn) {(name), (prio), NULL, (fn)}

typedef struct wasmext_plugin {
    const char *name;    /* display name, NULL to omit */
    const char *version; /* NULL to omit */
    const wasmext_hook *hooks;
    size_t hook_count;
    /* Optional: write extra registration entries (key, value pairs such as
     * "prompt" or "tool_guidance") and return how many pairs were written.
     * Entries that are not exactly that many pairs with string keys, or that
     * repeat abi_minor/name/version/hooks/shareable, are replaced by the one entry
     * "register_extra_error": "<what was wrong>". */
    uint32_t (*register_extra)(wasmext_writer *w);
} wasmext_plugin;

/* Every plugin defines exactly one, at file scope:
 *   static const wasmext_hook hooks[] = { WASMEXT_HOOK("greet", greet) };
 *   WASMEXT_PLUGIN("hello", "0.1.0", hooks); */
extern const wasmext_plugin wasmext_plugin_definition;
#define WASMEXT_PLUGIN(name, version, hooks)                         \
    const wasmext_plugin wasmext_plugin_definition = {               \
        (name), (version), (hooks), sizeof(hooks) / sizeof((hooks)[0]), NULL}
/* The same with extra registration entries written by `extra`. */
#define WASMEXT_PLUGIN_EX(name, version, hooks, extra)               \
    const wasmext_plugin wasmext_plugin_definition = {               \
        (name), (version), (hooks), sizeof(hooks) / sizeof((hooks)[0]), (extra)}

/* The request's data as a string; WASMEXT_ERR_TYPE if it is not one. */
int wasmext_data_str(const wasmext_call *call, const char **s, uint32_t *len);
/* Write a string value and answer it: `return wasmext_return_str(...)`. */
wasmext_verdict wasmext_return_str(wasmext_call *call, const char *s, size_t len);
/* Answer {"ok":false,"error":{code,message}}: `return wasmext_fail(...)`.
 * Both strings are copied at once, so temporaries are fine. */
wasmext_verdict wasmext_fail(wasmext_call *call, const char *code, const char *message);
wasmext_verdict wasmext_fail_n(wasmext_call *call, const char *code, size_t code_len,
                               const char *message, size_t message_len);
/* Pass a failed host_call answer's code and message on as the hook's error. */
wasmext_verdict wasmext_fail_answer(wasmext_call *call, const wasmext_answer *a);

#ifdef __cplusplus
}
#endif

#endif /* WASMEXT_H */
