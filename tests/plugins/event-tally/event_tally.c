/* event-tally: an on_event subscriber to turn.* that counts what reaches it in
 * plugin-scoped state (key = the topic), so a test can read, after the host has
 * closed, how many events were delivered. */
#include <wasmext.h>

static volatile int64_t sink;

static int64_t spin_setting(void) {
    wasmext_answer a;
    int64_t spin = 0;
    if (wasmext_config_get("spin", &a) == WASMEXT_OK && wasmext_read_int(&a.value, &spin) != WASMEXT_OK)
        spin = 0;
    wasmext_answer_free(&a);
    return spin;
}

static wasmext_verdict on_event(wasmext_call *call) {
    wasmext_reader topic_at;
    const char *topic;
    uint32_t topic_len;
    if (wasmext_map_find(&call->data, "topic", &topic_at) != WASMEXT_OK ||
        wasmext_read_str(&topic_at, &topic, &topic_len) != WASMEXT_OK || topic_len > 200)
        return wasmext_fail(call, WASMEXT_E_INVALID, "on_event data needs a topic");
    for (int64_t i = spin_setting(); i > 0; i--) sink += i;
    char key[201];
    for (uint32_t i = 0; i < topic_len; i++) key[i] = topic[i];
    key[topic_len] = '\0';
    int64_t count = 0;
    wasmext_answer got;
    if (wasmext_state_get(key, "plugin", &got) == WASMEXT_OK &&
        wasmext_read_int(&got.value, &count) != WASMEXT_OK)
        count = 0;
    wasmext_answer_free(&got);
    wasmext_writer value = WASMEXT_WRITER_INIT;
    wasmext_write_int(&value, count + 1);
    wasmext_answer set;
    int rc = wasmext_state_set(key, value.buf, value.len, "plugin", 0, &set);
    wasmext_writer_free(&value);
    if (rc != WASMEXT_OK) {
        wasmext_verdict v = wasmext_fail_answer(call, &set);
        wasmext_answer_free(&set);
        return v;
    }
    wasmext_answer_free(&set);
    return WASMEXT_UNCHANGED;
}

static uint32_t subscriptions(wasmext_writer *w) {
    wasmext_write_cstr(w, "subscriptions");
    wasmext_write_array(w, 1);
    wasmext_write_cstr(w, "turn.*");
    return 1;
}

static const wasmext_hook hooks[] = {WASMEXT_HOOK("on_event", on_event)};
WASMEXT_PLUGIN_EX("event-tally", "0.1.0", hooks, subscriptions);
