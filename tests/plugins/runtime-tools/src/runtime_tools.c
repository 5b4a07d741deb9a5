/* runtime-tools: tools registered after load (tool.register, ABI minor 2).
 *
 *   add_tool  data {name, description?, input_schema?}: registers that tool and
 *             answers the host's value ({name, replaced}) or its error
 *   add_many  data n: registers bulk_0 .. bulk_<n-1>; answers n, or the first
 *             error (a cap) as this call's error
 *   on_tool   every registered tool: answers {tool, args} */
#include <string.h>

#include <wasmext.h>

static wasmext_verdict answer_value(wasmext_call *call, wasmext_answer *a) {
    wasmext_copy_value(&a->value, call->out);
    wasmext_answer_free(a);
    return WASMEXT_VALUE;
}

static wasmext_verdict add_tool(wasmext_call *call) {
    wasmext_reader f;
    const char *s;
    uint32_t n;
    char name[80], description[256];
    const uint8_t *schema = NULL;
    size_t schema_len = 0;
    if (wasmext_map_find(&call->data, "name", &f) != WASMEXT_OK ||
        wasmext_read_str(&f, &s, &n) != WASMEXT_OK || n >= sizeof name)
        return wasmext_fail(call, WASMEXT_E_INVALID, "add_tool needs a short name");
    memcpy(name, s, n);
    name[n] = 0;
    bool described = wasmext_map_find(&call->data, "description", &f) == WASMEXT_OK &&
                     wasmext_read_str(&f, &s, &n) == WASMEXT_OK && n < sizeof description;
    if (described) {
        memcpy(description, s, n);
        description[n] = 0;
    }
    if (wasmext_map_find(&call->data, "input_schema", &f) == WASMEXT_OK)
        (void)wasmext_read_raw(&f, &schema, &schema_len);
    wasmext_answer a;
    if (wasmext_tool_register(name, described ? description : NULL, schema, schema_len, &a) !=
        WASMEXT_OK) {
        wasmext_verdict v = wasmext_fail_answer(call, &a);
        wasmext_answer_free(&a);
        return v;
    }
    return answer_value(call, &a);
}

static wasmext_verdict add_many(wasmext_call *call) {
    int64_t count;
    if (wasmext_read_int(&call->data, &count) != WASMEXT_OK || count < 0)
        return wasmext_fail(call, WASMEXT_E_INVALID, "add_many needs a count");
    for (int64_t i = 0; i < count; i++) {
        char name[32] = "bulk_";
        int at = 5;
        char digits[20];
        int d = 0;
        int64_t v = i;
        do {
            digits[d++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        while (d) name[at++] = digits[--d];
        name[at] = 0;
        wasmext_answer a;
        if (wasmext_tool_register(name, "bulk", NULL, 0, &a) != WASMEXT_OK) {
            wasmext_verdict verdict = wasmext_fail_answer(call, &a);
            wasmext_answer_free(&a);
            return verdict;
        }
        wasmext_answer_free(&a);
    }
    wasmext_write_int(call->out, count);
    return WASMEXT_VALUE;
}

static wasmext_verdict serve(wasmext_call *call) {
    wasmext_write_map(call->out, 2);
    wasmext_write_cstr(call->out, "tool");
    wasmext_reader f;
    if (wasmext_map_find(&call->data, "name", &f) != WASMEXT_OK ||
        wasmext_copy_value(&f, call->out) != WASMEXT_OK)
        wasmext_write_nil(call->out);
    wasmext_write_cstr(call->out, "args");
    if (wasmext_map_find(&call->data, "args", &f) != WASMEXT_OK ||
        wasmext_copy_value(&f, call->out) != WASMEXT_OK)
        wasmext_write_nil(call->out);
    return WASMEXT_VALUE;
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("add_tool", add_tool),
    WASMEXT_HOOK("add_many", add_many),
    WASMEXT_HOOK("on_tool", serve),
};

WASMEXT_PLUGIN("runtime-tools", "0.1.0", hooks);
