/* Typed wrappers for the ops beyond config/secret: state.*, event.emit
 * (minor 0), http.fetch, llm.complete, agents.request, agents.send (minor 1),
 * tool.register (minor 2). An op newer than the host's negotiated minor answers
 * `unsupported` locally (SPEC 3.1), without calling the host. */
#include <string.h>

#include "wasmext.h"

static const uint8_t k_nil[1] = {0xc0};
static wasmext_writer g_world = WASMEXT_WRITER_INIT;

static int world_error(wasmext_answer *a, const char *code, const char *message) {
    memset(a, 0, sizeof *a);
    wasmext_reader_init(&a->value, k_nil, sizeof k_nil);
    a->ok = false;
    a->code = code;
    a->code_len = (uint32_t)strlen(code);
    a->message = message;
    a->message_len = (uint32_t)strlen(message);
    return WASMEXT_ERR_HOST;
}

/* Start {"op": op, ...} with `pairs` more pairs; NULL when the host's minor is
 * below `since`. */
static wasmext_writer *begin_since(int since, const char *op, uint32_t pairs,
                                   wasmext_answer *out) {
    if (wasmext_host_abi_minor() < since) {
        world_error(out, WASMEXT_E_UNSUPPORTED, "the host's ABI minor is below the op's");
        return NULL;
    }
    wasmext_writer *w = &g_world;
    wasmext_writer_reset(w);
    wasmext_write_map(w, pairs + 1);
    wasmext_write_cstr(w, "op");
    wasmext_write_cstr(w, op);
    return w;
}

static wasmext_writer *begin(const char *op, uint32_t pairs, wasmext_answer *out) {
    return begin_since(1, op, pairs, out);
}

static int send(wasmext_writer *w, wasmext_answer *out) {
    if (wasmext_writer_error(w) != WASMEXT_OK)
        return world_error(out, WASMEXT_E_LIMIT, "out of memory building a host_call request");
    return wasmext_host_call(w->buf, w->len, out);
}

int wasmext_http_fetch(const char *method, const char *url, const void *headers_map,
                       size_t headers_len, const void *body, size_t body_len,
                       wasmext_answer *out) {
    if (!url) return world_error(out, WASMEXT_E_INVALID, "http.fetch needs a url");
    uint32_t pairs = 2 + (headers_map ? 1 : 0) + (body ? 1 : 0);
    wasmext_writer *w = begin(WASMEXT_OP_HTTP_FETCH, pairs, out);
    if (!w) return WASMEXT_ERR_HOST;
    wasmext_write_cstr(w, "url");
    wasmext_write_cstr(w, url);
    wasmext_write_cstr(w, "method");
    wasmext_write_cstr(w, method ? method : "GET");
    if (headers_map) {
        wasmext_write_cstr(w, "headers");
        wasmext_write_raw(w, headers_map, headers_len);
    }
    if (body) {
        wasmext_write_cstr(w, "body");
        wasmext_write_bin(w, body, body_len);
    }
    return send(w, out);
}

static int llm_complete(const char *system, const char *prompt, const char *model,
                        int max_tokens, double temperature, bool json_mode, wasmext_answer *out) {
    if (!prompt) return world_error(out, WASMEXT_E_INVALID, "llm.complete needs a prompt");
    uint32_t pairs = 1 + (model ? 1 : 0) + (max_tokens > 0 ? 1 : 0) + (temperature >= 0 ? 1 : 0) +
                     (json_mode ? 1 : 0);
    wasmext_writer *w = begin(WASMEXT_OP_LLM_COMPLETE, pairs, out);
    if (!w) return WASMEXT_ERR_HOST;
    wasmext_write_cstr(w, "messages");
    wasmext_write_array(w, system ? 2 : 1);
    if (system) {
        wasmext_write_map(w, 2);
        wasmext_write_cstr(w, "role");
        wasmext_write_cstr(w, "system");
        wasmext_write_cstr(w, "content");
        wasmext_write_cstr(w, system);
    }
    wasmext_write_map(w, 2);
    wasmext_write_cstr(w, "role");
    wasmext_write_cstr(w, "user");
    wasmext_write_cstr(w, "content");
    wasmext_write_cstr(w, prompt);
    if (model) {
        wasmext_write_cstr(w, "model");
        wasmext_write_cstr(w, model);
    }
    if (max_tokens > 0) {
        wasmext_write_cstr(w, "max_tokens");
        wasmext_write_int(w, max_tokens);
    }
    if (temperature >= 0) {
        wasmext_write_cstr(w, "temperature");
        wasmext_write_double(w, temperature);
    }
    if (json_mode) {
        wasmext_write_cstr(w, "json_mode");
        wasmext_write_bool(w, true);
    }
    return send(w, out);
}

int wasmext_llm_complete(const char *system, const char *prompt, const char *model,
                         int max_tokens, double temperature, wasmext_answer *out) {
    return llm_complete(system, prompt, model, max_tokens, temperature, false, out);
}

int wasmext_llm_complete_json(const char *system, const char *prompt, const char *model,
                              int max_tokens, double temperature, wasmext_answer *out) {
    return llm_complete(system, prompt, model, max_tokens, temperature, true, out);
}

static int agents_op(const char *op, const char *agent, const void *input, size_t input_len,
                     int timeout_ms, wasmext_answer *out) {
    if (!agent || !input)
        return world_error(out, WASMEXT_E_INVALID, "agents.* needs an agent and an input");
    wasmext_writer *w = begin(op, 2 + (timeout_ms > 0 ? 1 : 0), out);
    if (!w) return WASMEXT_ERR_HOST;
    wasmext_write_cstr(w, "agent");
    wasmext_write_cstr(w, agent);
    wasmext_write_cstr(w, "input");
    wasmext_write_raw(w, input, input_len);
    if (timeout_ms > 0) {
        wasmext_write_cstr(w, "timeout_ms");
        wasmext_write_int(w, timeout_ms);
    }
    return send(w, out);
}

int wasmext_agents_request(const char *agent, const void *input, size_t input_len,
                           int timeout_ms, wasmext_answer *out) {
    return agents_op(WASMEXT_OP_AGENTS_REQUEST, agent, input, input_len, timeout_ms, out);
}

int wasmext_agents_send(const char *agent, const void *input, size_t input_len,
                        wasmext_answer *out) {
    return agents_op(WASMEXT_OP_AGENTS_SEND, agent, input, input_len, 0, out);
}

/* ---- state.*, event.emit (minor 0) ------------------------------------ */

/* "scope" is written only when the caller names one: the host's default is
 * the session scope, as in every SDK. */
static wasmext_writer *begin_state(const char *op, const char *scope, uint32_t pairs,
                                   wasmext_answer *out) {
    wasmext_writer *w = begin_since(0, op, pairs + (scope ? 1 : 0), out);
    if (w && scope) {
        wasmext_write_cstr(w, "scope");
        wasmext_write_cstr(w, scope);
    }
    return w;
}

int wasmext_state_get(const char *key, const char *scope, wasmext_answer *out) {
    if (!key) return world_error(out, WASMEXT_E_INVALID, "state.get needs a key");
    wasmext_writer *w = begin_state(WASMEXT_OP_STATE_GET, scope, 1, out);
    if (!w) return WASMEXT_ERR_HOST;
    wasmext_write_cstr(w, "key");
    wasmext_write_cstr(w, key);
    return send(w, out);
}

int wasmext_state_set(const char *key, const void *value, size_t value_len, const char *scope,
                      int ttl_seconds, wasmext_answer *out) {
    if (!key || !value || value_len == 0)
        return world_error(out, WASMEXT_E_INVALID, "state.set needs a key and a value");
    wasmext_writer *w = begin_state(WASMEXT_OP_STATE_SET, scope, 2 + (ttl_seconds > 0 ? 1 : 0),
                                    out);
    if (!w) return WASMEXT_ERR_HOST;
    wasmext_write_cstr(w, "key");
    wasmext_write_cstr(w, key);
    wasmext_write_cstr(w, "value");
    wasmext_write_raw(w, value, value_len);
    if (ttl_seconds > 0) {
        wasmext_write_cstr(w, "ttl");
        wasmext_write_int(w, ttl_seconds);
    }
    return send(w, out);
}

int wasmext_state_set_str(const char *key, const char *value, const char *scope,
                          wasmext_answer *out) {
    if (!value) return world_error(out, WASMEXT_E_INVALID, "state.set needs a value");
    wasmext_writer encoded = WASMEXT_WRITER_INIT;
    wasmext_write_cstr(&encoded, value);
    int rc = wasmext_writer_error(&encoded) != WASMEXT_OK
        ? world_error(out, WASMEXT_E_LIMIT, "out of memory encoding a state value")
        : wasmext_state_set(key, encoded.buf, encoded.len, scope, 0, out);
    wasmext_writer_free(&encoded);
    return rc;
}

int wasmext_state_delete(const char *key, const char *scope, wasmext_answer *out) {
    if (!key) return world_error(out, WASMEXT_E_INVALID, "state.delete needs a key");
    wasmext_writer *w = begin_state(WASMEXT_OP_STATE_DELETE, scope, 1, out);
    if (!w) return WASMEXT_ERR_HOST;
    wasmext_write_cstr(w, "key");
    wasmext_write_cstr(w, key);
    return send(w, out);
}

int wasmext_state_keys(const char *prefix, const char *scope, wasmext_answer *out) {
    wasmext_writer *w = begin_state(WASMEXT_OP_STATE_KEYS, scope, prefix ? 1 : 0, out);
    if (!w) return WASMEXT_ERR_HOST;
    if (prefix) {
        wasmext_write_cstr(w, "prefix");
        wasmext_write_cstr(w, prefix);
    }
    return send(w, out);
}

int wasmext_emit(const char *topic, const void *payload, size_t payload_len,
                 wasmext_answer *out) {
    if (!topic) return world_error(out, WASMEXT_E_INVALID, "event.emit needs a topic");
    wasmext_writer *w = begin_since(0, WASMEXT_OP_EVENT_EMIT, payload ? 2 : 1, out);
    if (!w) return WASMEXT_ERR_HOST;
    wasmext_write_cstr(w, "topic");
    wasmext_write_cstr(w, topic);
    if (payload) {
        wasmext_write_cstr(w, "payload");
        wasmext_write_raw(w, payload, payload_len);
    }
    return send(w, out);
}

/* ---- tool.register (minor 2) ------------------------------------------- */

int wasmext_tool_register(const char *name, const char *description,
                          const void *input_schema, size_t schema_len, wasmext_answer *out) {
    if (!name) return world_error(out, WASMEXT_E_INVALID, "tool.register needs a name");
    uint32_t pairs = 1 + (description ? 1 : 0) + (input_schema ? 1 : 0);
    wasmext_writer *w = begin_since(2, WASMEXT_OP_TOOL_REGISTER, pairs, out);
    if (!w) return WASMEXT_ERR_HOST;
    wasmext_write_cstr(w, "name");
    wasmext_write_cstr(w, name);
    if (description) {
        wasmext_write_cstr(w, "description");
        wasmext_write_cstr(w, description);
    }
    if (input_schema) {
        wasmext_write_cstr(w, "input_schema");
        wasmext_write_raw(w, input_schema, schema_len);
    }
    return send(w, out);
}
