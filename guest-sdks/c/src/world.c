/* Wrappers for the ops of ABI minor 1 (SPEC 4.5): http.fetch, llm.complete,
 * agents.request, agents.send. Each answers `unsupported` locally when the
 * host negotiated a minor below 1 (SPEC 3.1), without calling the host. */
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

/* Start {"op": op, ...} with `pairs` more pairs; NULL when the host is too old. */
static wasmext_writer *begin(const char *op, uint32_t pairs, wasmext_answer *out) {
    if (wasmext_host_abi_minor() < 1) {
        world_error(out, WASMEXT_E_UNSUPPORTED, "the host's ABI minor is below 1");
        return NULL;
    }
    wasmext_writer *w = &g_world;
    wasmext_writer_reset(w);
    wasmext_write_map(w, pairs + 1);
    wasmext_write_cstr(w, "op");
    wasmext_write_cstr(w, op);
    return w;
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

int wasmext_llm_complete(const char *system, const char *prompt, const char *model,
                         int max_tokens, double temperature, wasmext_answer *out) {
    if (!prompt) return world_error(out, WASMEXT_E_INVALID, "llm.complete needs a prompt");
    uint32_t pairs = 1 + (model ? 1 : 0) + (max_tokens > 0 ? 1 : 0) + (temperature >= 0 ? 1 : 0);
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
    return send(w, out);
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
