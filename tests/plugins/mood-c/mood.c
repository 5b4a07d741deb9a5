/* mood-c: #mood asks the host's model in JSON mode, #plain without it; each
 * answers the model's text, so a test sees what the C SDK sent. */
#include <wasmext.h>

static wasmext_verdict ask(wasmext_call *call, bool json_mode) {
    wasmext_reader answer_at;
    const char *answer;
    uint32_t len;
    if (wasmext_map_find(&call->data, "answer", &answer_at) != WASMEXT_OK ||
        wasmext_read_str(&answer_at, &answer, &len) != WASMEXT_OK || len > 4000)
        return wasmext_fail(call, WASMEXT_E_INVALID, "output_extension data needs an answer");
    char prompt[4001];
    for (uint32_t i = 0; i < len; i++) prompt[i] = answer[i];
    prompt[len] = '\0';
    wasmext_answer reply;
    int rc = json_mode ? wasmext_llm_complete_json("Rate the mood as JSON.", prompt, NULL, 64, 0, &reply)
                       : wasmext_llm_complete(NULL, prompt, NULL, 64, -1, &reply);
    if (rc != WASMEXT_OK) {
        wasmext_verdict v = wasmext_fail_answer(call, &reply);
        wasmext_answer_free(&reply);
        return v;
    }
    wasmext_reader text_at;
    const char *text;
    uint32_t text_len;
    wasmext_verdict v;
    if (wasmext_map_find(&reply.value, "text", &text_at) == WASMEXT_OK &&
        wasmext_read_str(&text_at, &text, &text_len) == WASMEXT_OK)
        v = wasmext_return_str(call, text, text_len);
    else
        v = wasmext_fail(call, WASMEXT_E_INVALID, "the answer has no text");
    wasmext_answer_free(&reply);
    return v;
}

static wasmext_verdict mood(wasmext_call *call) { return ask(call, true); }
static wasmext_verdict plain(wasmext_call *call) { return ask(call, false); }

static const wasmext_hook hooks[] = {
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "mood", mood},
    {"output_extension", WASMEXT_PRIORITY_DEFAULT, "plain", plain},
};
WASMEXT_PLUGIN("mood-c", "0.1.0", hooks);
