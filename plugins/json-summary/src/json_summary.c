/* Output extension #summary[:short|long] (docs/world.md): asks the host
 * application's model for a JSON summary of the answer through llm.complete
 * (grant "llm") and returns {"summary": <the model's JSON text>, "usage",
 * "cost"}. The host adds the same usage and cost to the extension result. */
#include <wasmext.h>

static const char k_system[] =
    "You summarise an assistant's answer. Reply with one JSON object "
    "{\"summary\": string} and nothing else.";

/* The prompt for the data's "answer": "Summarise <how>:\n\n<answer>", NUL-ended. */
static int prompt_of(const wasmext_reader *data, const char *param, wasmext_writer *w) {
    wasmext_reader field;
    const char *answer;
    uint32_t len;
    if (wasmext_map_find(data, "answer", &field) != WASMEXT_OK ||
        wasmext_read_str(&field, &answer, &len) != WASMEXT_OK)
        return WASMEXT_ERR_TYPE;
    const char *how = param && param[0] == 'l' ? "in a few sentences" : "in at most twelve words";
    wasmext_write_raw(w, "Summarise ", 10);
    while (*how) wasmext_write_raw(w, how++, 1);
    wasmext_write_raw(w, ":\n\n", 3);
    wasmext_write_raw(w, answer, len);
    wasmext_write_raw(w, "", 1);
    return wasmext_writer_error(w);
}

static wasmext_verdict summary(wasmext_call *call) {
    wasmext_reader field;
    const char *param = "short";
    const char *p;
    uint32_t plen;
    /* allowed_params (short, long) are checked by the host before this call */
    if (wasmext_map_find(&call->data, "param", &field) == WASMEXT_OK &&
        wasmext_read_str(&field, &p, &plen) == WASMEXT_OK && plen > 0)
        param = p[0] == 'l' ? "long" : "short";
    wasmext_writer prompt = WASMEXT_WRITER_INIT;
    if (prompt_of(&call->data, param, &prompt) != WASMEXT_OK) {
        wasmext_writer_free(&prompt);
        return wasmext_fail(call, WASMEXT_E_INVALID, "output_extension data needs an answer");
    }
    wasmext_answer a;
    int rc = wasmext_llm_complete(k_system, (const char *)prompt.buf, NULL, 200, 0.0, &a);
    wasmext_writer_free(&prompt);
    if (rc != WASMEXT_OK) {
        wasmext_verdict failed = wasmext_fail_answer(call, &a);
        wasmext_answer_free(&a);
        return failed;
    }
    static const char *const keys[] = {"text", "usage", "cost"};
    static const char *const out_keys[] = {"summary", "usage", "cost"};
    wasmext_write_map(call->out, 3);
    for (int i = 0; i < 3; i++) {
        const uint8_t *raw;
        size_t raw_len;
        wasmext_write_cstr(call->out, out_keys[i]);
        if (wasmext_map_find(&a.value, keys[i], &field) == WASMEXT_OK &&
            wasmext_read_raw(&field, &raw, &raw_len) == WASMEXT_OK)
            wasmext_write_raw(call->out, raw, raw_len);
        else
            wasmext_write_nil(call->out);
    }
    wasmext_answer_free(&a);
    return WASMEXT_VALUE;
}

/* The extension's declaration: the host refuses other params before calling. */
static uint32_t extra(wasmext_writer *w) {
    wasmext_write_cstr(w, "output_extensions");
    wasmext_write_array(w, 1);
    wasmext_write_map(w, 3);
    wasmext_write_cstr(w, "name");
    wasmext_write_cstr(w, "summary");
    wasmext_write_cstr(w, "allowed_params");
    wasmext_write_array(w, 2);
    wasmext_write_cstr(w, "short");
    wasmext_write_cstr(w, "long");
    wasmext_write_cstr(w, "content_type");
    wasmext_write_cstr(w, "application/json");
    return 1;
}

static const wasmext_hook hooks[] = {
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "summary", summary},
};

WASMEXT_PLUGIN_EX("json-summary", "0.1.0", hooks, extra);
