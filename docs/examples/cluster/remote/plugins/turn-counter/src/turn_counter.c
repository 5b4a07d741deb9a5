/* turn-counter: before_agent adds one to the plugin-scoped state key "turns".
 * The get and the set commit together when the call ends (or not at all), so a
 * worker killed mid-call leaves the count as it was before, never half-written. */
#include <wasmext.h>

static wasmext_verdict count(wasmext_call *call) {
    int64_t turns = 0;
    wasmext_writer req = WASMEXT_WRITER_INIT;
    wasmext_write_map(&req, 3);
    wasmext_write_cstr(&req, "op");
    wasmext_write_cstr(&req, "state.get");
    wasmext_write_cstr(&req, "key");
    wasmext_write_cstr(&req, "turns");
    wasmext_write_cstr(&req, "scope");
    wasmext_write_cstr(&req, "plugin");
    wasmext_answer got;
    int rc = wasmext_host_call(req.buf, req.len, &got);
    wasmext_writer_free(&req);
    if (rc == WASMEXT_OK && got.ok)
        (void)wasmext_read_int(&got.value, &turns);
    else if (rc == WASMEXT_OK && !wasmext_answer_is(&got, "not_found")) {
        wasmext_verdict v = wasmext_fail_answer(call, &got);
        wasmext_answer_free(&got);
        return v;
    }
    wasmext_answer_free(&got);

    wasmext_writer set = WASMEXT_WRITER_INIT;
    wasmext_write_map(&set, 4);
    wasmext_write_cstr(&set, "op");
    wasmext_write_cstr(&set, "state.set");
    wasmext_write_cstr(&set, "key");
    wasmext_write_cstr(&set, "turns");
    wasmext_write_cstr(&set, "value");
    wasmext_write_int(&set, turns + 1);
    wasmext_write_cstr(&set, "scope");
    wasmext_write_cstr(&set, "plugin");
    wasmext_answer done;
    rc = wasmext_host_call(set.buf, set.len, &done);
    wasmext_writer_free(&set);
    if (rc == WASMEXT_OK && !done.ok) {
        wasmext_verdict v = wasmext_fail_answer(call, &done);
        wasmext_answer_free(&done);
        return v;
    }
    wasmext_answer_free(&done);
    if (rc != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INTERNAL, "state.set could not be sent");
    return WASMEXT_UNCHANGED;
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("before_agent", count),
};

WASMEXT_PLUGIN("turn-counter", "0.1.0", hooks);
