"""The wasmext guest SDK for Python plugins (componentize-py components).

Three layers, as in every wasmext SDK: `raw` (the world's imports), `host`
(the host's services as functions that return or raise; `world` holds those of
ABI minor 1) and `plugin` (the `Plugin` class, `@hook`, `export`). `msgpack` is the codec of ABI v1.
"""

from wasmext_guest.helpers import (
    count_words,
    error_result,
    extract_code_blocks,
    extract_json_from_text,
    extract_sentences,
    json_result,
    safe_json_dumps,
    text_result,
    truncate,
)
from wasmext_guest.host import (
    HostError,
    config,
    emit,
    log,
    request,
    secret,
    state_delete,
    state_get,
    state_keys,
    state_set,
)
from wasmext_guest.plugin import UNCHANGED, Call, Fail, Plugin, Stop, export, hook
from wasmext_guest.world import (
    ABI_MINOR,
    agents_request,
    agents_send,
    host_minor,
    http_fetch,
    llm_complete,
    progress,
    prompt_get,
    prompt_list,
    resource_list,
    resource_read,
    tool_register,
)

__all__ = ["ABI_MINOR", "UNCHANGED", "Call", "Fail", "HostError", "Plugin", "Stop",
           "agents_request", "agents_send", "config", "count_words", "emit", "error_result",
           "export", "extract_code_blocks", "extract_json_from_text", "extract_sentences",
           "hook", "host_minor", "http_fetch", "json_result", "llm_complete", "log",
           "progress", "prompt_get", "prompt_list", "request", "resource_list",
           "resource_read", "safe_json_dumps", "secret", "state_delete", "state_get",
           "state_keys", "state_set", "text_result", "tool_register", "truncate"]
