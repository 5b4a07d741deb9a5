/* Conformance plugin: each hook exercises one part of the SDK so that the
 * cross-SDK test suite can compare every SDK's behaviour byte for byte. */
#include <string.h>

#include <wasmext.h>

/* Re-encoding through the reader and writer (not a byte copy) proves every
 * width decodes and re-encodes canonically. */
static wasmext_verdict echo(wasmext_call *call) {
    wasmext_reader r = call->data;
    if (wasmext_copy_value(&r, call->out) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "data could not be decoded");
    return WASMEXT_VALUE;
}

/* data = key → the setting's value; host errors are passed on unchanged. */
static wasmext_verdict config(wasmext_call *call) {
    const char *key;
    uint32_t key_len;
    if (wasmext_data_str(call, &key, &key_len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "config expects a string key");
    /* The wrapper takes a C string; copy the key out of the request. */
    wasmext_writer ckey = WASMEXT_WRITER_INIT;
    wasmext_write_raw(&ckey, key, key_len);
    wasmext_write_raw(&ckey, "", 1);
    if (wasmext_writer_error(&ckey) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_LIMIT, "out of memory");
    wasmext_answer a;
    wasmext_verdict verdict = WASMEXT_VALUE;
    const uint8_t *raw;
    size_t raw_len;
    if (wasmext_config_get((const char *)ckey.buf, &a) != WASMEXT_OK)
        verdict = wasmext_fail_answer(call, &a);
    else if (wasmext_read_raw(&a.value, &raw, &raw_len) == WASMEXT_OK)
        wasmext_write_raw(call->out, raw, raw_len);
    else
        verdict = wasmext_fail(call, WASMEXT_E_INTERNAL, "unreadable config value");
    wasmext_answer_free(&a);
    wasmext_writer_free(&ckey);
    return verdict;
}

/* data = text → one info line through the direct `log` import; value nil. */
static wasmext_verdict log_hook(wasmext_call *call) {
    const char *text;
    uint32_t len;
    if (wasmext_data_str(call, &text, &len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "log expects a string");
    wasmext_log_n(WASMEXT_LOG_INFO, text, len);
    wasmext_write_nil(call->out);
    return WASMEXT_VALUE;
}

/* data = a request map, sent as-is; the value is the host's whole answer,
 * failures included, so the suite can check every host_call verdict. */
static wasmext_verdict host(wasmext_call *call) {
    wasmext_reader r = call->data;
    const uint8_t *req;
    size_t req_len;
    uint32_t pairs;
    wasmext_reader probe = r;
    if (wasmext_read_map(&probe, &pairs) != WASMEXT_OK ||
        wasmext_read_raw(&r, &req, &req_len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "host expects a request map");
    wasmext_answer a;
    (void)wasmext_host_call(req, req_len, &a);
    wasmext_verdict verdict = WASMEXT_VALUE;
    if (a.buf && wasmext_validate(a.buf, a.buf_len) == WASMEXT_OK)
        wasmext_write_raw(call->out, a.buf, a.buf_len);
    else /* no answer at all, or one the SDK refused: say so as an error */
        verdict = wasmext_fail_answer(call, &a);
    wasmext_answer_free(&a);
    return verdict;
}

/* data = an array of up to 8 request maps, all sent before any answer is
 * read; the value is the array of the host's answers. Every answer must
 * outlive the host calls after it, wherever the host wrote it (minor 3). */
static wasmext_verdict hosts(wasmext_call *call) {
    wasmext_reader r = call->data;
    uint32_t n;
    if (wasmext_read_array(&r, &n) != WASMEXT_OK || n > 8)
        return wasmext_fail(call, WASMEXT_E_INVALID, "hosts expects up to 8 request maps");
    wasmext_answer answers[8];
    uint32_t sent = 0;
    for (; sent < n; sent++) {
        const uint8_t *req;
        size_t req_len;
        if (wasmext_read_raw(&r, &req, &req_len) != WASMEXT_OK) break;
        (void)wasmext_host_call(req, req_len, &answers[sent]);
    }
    wasmext_verdict verdict = WASMEXT_VALUE;
    if (sent < n) verdict = wasmext_fail(call, WASMEXT_E_INVALID, "unreadable request");
    else wasmext_write_array(call->out, n);
    for (uint32_t i = 0; i < sent; i++) {
        wasmext_answer *a = &answers[i];
        if (verdict == WASMEXT_VALUE) {
            if (a->buf && wasmext_validate(a->buf, a->buf_len) == WASMEXT_OK)
                wasmext_write_raw(call->out, a->buf, a->buf_len);
            else
                wasmext_write_nil(call->out);
        }
        wasmext_answer_free(a);
    }
    return verdict;
}

/* The minor-1 wrappers: the value is the host's whole answer map, as for
 * `host`; a local (guest-side) refusal is an error with its code. */
static wasmext_verdict whole_answer(wasmext_call *call, wasmext_answer *a) {
    wasmext_verdict verdict = WASMEXT_VALUE;
    if (a->buf && wasmext_validate(a->buf, a->buf_len) == WASMEXT_OK)
        wasmext_write_raw(call->out, a->buf, a->buf_len);
    else
        verdict = wasmext_fail_answer(call, a);
    wasmext_answer_free(a);
    return verdict;
}

/* data = a string, copied out as a C string into *w. */
static const char *data_cstr(wasmext_call *call, wasmext_writer *w) {
    const char *s;
    uint32_t len;
    if (wasmext_data_str(call, &s, &len) != WASMEXT_OK) return NULL;
    wasmext_write_raw(w, s, len);
    wasmext_write_raw(w, "", 1);
    return wasmext_writer_error(w) == WASMEXT_OK ? (const char *)w->buf : NULL;
}

/* data = url → http.fetch GET. */
static wasmext_verdict fetch(wasmext_call *call) {
    wasmext_writer s = WASMEXT_WRITER_INIT;
    const char *url = data_cstr(call, &s);
    if (!url) return wasmext_fail(call, WASMEXT_E_INVALID, "fetch expects a url");
    wasmext_answer a;
    (void)wasmext_http_fetch(NULL, url, NULL, 0, NULL, 0, &a);
    wasmext_writer_free(&s);
    return whole_answer(call, &a);
}

/* data = prompt → llm.complete with max_tokens 50. */
static wasmext_verdict llm(wasmext_call *call) {
    wasmext_writer s = WASMEXT_WRITER_INIT;
    const char *prompt = data_cstr(call, &s);
    if (!prompt) return wasmext_fail(call, WASMEXT_E_INVALID, "llm expects a prompt");
    wasmext_answer a;
    (void)wasmext_llm_complete(NULL, prompt, NULL, 50, -1.0, &a);
    wasmext_writer_free(&s);
    return whole_answer(call, &a);
}

/* data = key → state.set of the string "v:<key>" then state.get of it, both in
 * the default (session) scope; the value is state.get's whole answer. */
static wasmext_verdict remember(wasmext_call *call) {
    wasmext_writer s = WASMEXT_WRITER_INIT, v = WASMEXT_WRITER_INIT;
    const char *key = data_cstr(call, &s);
    if (!key) return wasmext_fail(call, WASMEXT_E_INVALID, "remember expects a key");
    wasmext_write_raw(&v, "v:", 2);
    wasmext_write_raw(&v, key, strlen(key) + 1);
    wasmext_answer a;
    if (wasmext_writer_error(&v) != WASMEXT_OK ||
        wasmext_state_set_str(key, (const char *)v.buf, NULL, &a) != WASMEXT_OK) {
        wasmext_writer_free(&s);
        wasmext_writer_free(&v);
        return whole_answer(call, &a);
    }
    wasmext_answer_free(&a);
    (void)wasmext_state_get(key, NULL, &a);
    wasmext_writer_free(&s);
    wasmext_writer_free(&v);
    return whole_answer(call, &a);
}

/* data = topic → event.emit with the payload "hi"; the whole answer. */
static wasmext_verdict announce(wasmext_call *call) {
    static const uint8_t hi[3] = {0xa2, 'h', 'i'};
    wasmext_writer s = WASMEXT_WRITER_INIT;
    const char *topic = data_cstr(call, &s);
    if (!topic) return wasmext_fail(call, WASMEXT_E_INVALID, "announce expects a topic");
    wasmext_answer a;
    (void)wasmext_emit(topic, hi, sizeof hi, &a);
    wasmext_writer_free(&s);
    return whole_answer(call, &a);
}

/* turn: data = agent name → agents.request with input "ping";
 * step: the same through agents.send. */
static wasmext_verdict agent_call(wasmext_call *call, bool wait) {
    wasmext_writer s = WASMEXT_WRITER_INIT;
    const char *agent = data_cstr(call, &s);
    if (!agent) return wasmext_fail(call, WASMEXT_E_INVALID, "expects an agent name");
    static const uint8_t ping[] = {0xa4, 'p', 'i', 'n', 'g'};
    wasmext_answer a;
    if (wait)
        (void)wasmext_agents_request(agent, ping, sizeof ping, 0, &a);
    else
        (void)wasmext_agents_send(agent, ping, sizeof ping, &a);
    wasmext_writer_free(&s);
    return whole_answer(call, &a);
}

static wasmext_verdict turn(wasmext_call *call) { return agent_call(call, true); }
static wasmext_verdict step(wasmext_call *call) { return agent_call(call, false); }

static wasmext_verdict fail(wasmext_call *call) {
    const char *msg;
    uint32_t len;
    if (wasmext_data_str(call, &msg, &len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "fail expects a string message");
    return wasmext_fail_n(call, WASMEXT_E_FAILED, sizeof WASMEXT_E_FAILED - 1, msg, len);
}

static wasmext_verdict unchanged(wasmext_call *call) {
    (void)call;
    return WASMEXT_UNCHANGED;
}

static wasmext_verdict stop(wasmext_call *call) {
    const uint8_t *raw;
    size_t len;
    wasmext_reader r = call->data;
    if (wasmext_read_raw(&r, &raw, &len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "data could not be read");
    wasmext_write_raw(call->out, raw, len);
    return WASMEXT_STOP;
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("echo", echo),
    WASMEXT_HOOK("config", config),
    WASMEXT_HOOK("log", log_hook),
    WASMEXT_HOOK("host", host),
    WASMEXT_HOOK("hosts", hosts),
    WASMEXT_HOOK("fail", fail),
    WASMEXT_HOOK("unchanged", unchanged),
    WASMEXT_HOOK("stop", stop),
    WASMEXT_HOOK("fetch", fetch),
    WASMEXT_HOOK("llm", llm),
    WASMEXT_HOOK("turn", turn),
    WASMEXT_HOOK("step", step),
    WASMEXT_HOOK("remember", remember),
    WASMEXT_HOOK("announce", announce),
};

WASMEXT_PLUGIN("c-conformance", "0.1.0", hooks);
