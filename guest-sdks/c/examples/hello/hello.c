/* hello: hook "greet" turns the string "Ada" into "Hello, Ada!". */
#include <wasmext.h>

static wasmext_verdict greet(wasmext_call *call) {
    const char *name;
    uint32_t name_len;
    if (wasmext_data_str(call, &name, &name_len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "greet expects a string");

    /* The host answers with the manifest default; "Hello" covers a host
     * that has no value at all (not_found). */
    const char *greeting = "Hello";
    uint32_t greeting_len = 5;
    wasmext_answer setting;
    if (wasmext_config_get("greeting", &setting) == WASMEXT_OK)
        (void)wasmext_read_str(&setting.value, &greeting, &greeting_len);

    /* A str header holds the length, so assemble the text before writing it. */
    wasmext_writer text = WASMEXT_WRITER_INIT;
    wasmext_write_raw(&text, greeting, greeting_len);
    wasmext_write_raw(&text, ", ", 2);
    wasmext_write_raw(&text, name, name_len);
    wasmext_write_raw(&text, "!", 1);
    wasmext_log_n(WASMEXT_LOG_INFO, (const char *)text.buf, text.len);
    wasmext_verdict v = wasmext_writer_error(&text) == WASMEXT_OK
                            ? wasmext_return_str(call, (const char *)text.buf, text.len)
                            : wasmext_fail(call, WASMEXT_E_LIMIT, "out of memory");
    wasmext_writer_free(&text);
    wasmext_answer_free(&setting); /* greeting pointed into it until here */
    return v;
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("greet", greet),
};

WASMEXT_PLUGIN("hello", "0.1.0", hooks);
