/* relay-tools: registers the tool "ask" and answers it by calling another
 * tool (typically an MCP server's) with the host op tool.call. */
#include <string.h>
#include <wasmext.h>

static uint32_t tools(wasmext_writer *w) {
    wasmext_write_cstr(w, "tools");
    wasmext_write_array(w, 1);
    wasmext_write_map(w, 3);
    wasmext_write_cstr(w, "name");
    wasmext_write_cstr(w, "ask");
    wasmext_write_cstr(w, "description");
    wasmext_write_cstr(w, "Ask the upstream tool a question.");
    wasmext_write_cstr(w, "input_schema");
    wasmext_write_map(w, 3); /* {"type":"object","properties":{...},"required":["question"]} */
    wasmext_write_cstr(w, "type");
    wasmext_write_cstr(w, "object");
    wasmext_write_cstr(w, "properties");
    wasmext_write_map(w, 1);
    wasmext_write_cstr(w, "question");
    wasmext_write_map(w, 1);
    wasmext_write_cstr(w, "type");
    wasmext_write_cstr(w, "string");
    wasmext_write_cstr(w, "required");
    wasmext_write_array(w, 1);
    wasmext_write_cstr(w, "question");
    return 1;
}

static wasmext_verdict ask(wasmext_call *call) {
    wasmext_reader args, q, status;
    const char *question, *upstream = "calc__echo", *st;
    uint32_t qlen, ulen = 10, stlen;
    if (wasmext_map_find(&call->data, "args", &args) != WASMEXT_OK ||
        wasmext_map_find(&args, "question", &q) != WASMEXT_OK ||
        wasmext_read_str(&q, &question, &qlen) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "ask needs a question");
    wasmext_answer setting, answer;
    if (wasmext_config_get("upstream", &setting) == WASMEXT_OK)
        (void)wasmext_read_str(&setting.value, &upstream, &ulen);
    wasmext_writer req = WASMEXT_WRITER_INIT;
    wasmext_write_map(&req, 3);
    wasmext_write_cstr(&req, "op");
    wasmext_write_cstr(&req, "tool.call");
    wasmext_write_cstr(&req, "name");
    wasmext_write_str(&req, upstream, ulen);
    wasmext_write_cstr(&req, "args");
    wasmext_write_map(&req, 1);
    wasmext_write_cstr(&req, "text");
    wasmext_write_str(&req, question, qlen);
    int rc = wasmext_host_call(req.buf, req.len, &answer);
    wasmext_writer_free(&req);
    wasmext_verdict v;
    if (rc != WASMEXT_OK) {
        v = wasmext_fail_answer(call, &answer);
    } else if (wasmext_map_find(&answer.value, "status", &status) != WASMEXT_OK ||
               wasmext_read_str(&status, &st, &stlen) != WASMEXT_OK ||
               !wasmext_str_eq(st, stlen, "ok")) {
        v = wasmext_fail(call, WASMEXT_E_FAILED, "the upstream tool failed");
    } else {
        wasmext_reader output;
        wasmext_write_map(call->out, 2);
        wasmext_write_cstr(call->out, "via");
        wasmext_write_str(call->out, upstream, ulen);
        wasmext_write_cstr(call->out, "answer");
        if (wasmext_map_find(&answer.value, "output", &output) == WASMEXT_OK)
            wasmext_copy_value(&output, call->out);
        else
            wasmext_write_nil(call->out);
        v = WASMEXT_VALUE;
    }
    wasmext_answer_free(&answer);
    wasmext_answer_free(&setting);
    return v;
}

static const wasmext_hook hooks[] = {
    {"on_tool", WASMEXT_PRIORITY_DEFAULT, "ask", ask},
};

WASMEXT_PLUGIN_EX("relay-tools", "0.1.0", hooks, tools);
