"""The wasmext guest SDK for Python plugins (componentize-py components).

Three layers, as in every wasmext SDK: `raw` (the world's imports), `host`
(the host's services as functions that return or raise) and `plugin` (the
`Plugin` class, `@hook`, `export`). `msgpack` is the codec of ABI v1.
"""

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

__all__ = ["UNCHANGED", "Call", "Fail", "HostError", "Plugin", "Stop", "config", "emit",
           "export", "hook", "log", "request", "secret", "state_delete", "state_get",
           "state_keys", "state_set"]
