"""Layer 1: the world's imports as componentize-py generates them, unchanged.

`host_call(request) -> answer` carries the MessagePack documents of ABI v1;
`log(level, message)` is the cheap direct log line. Everything above this
module goes through these two functions.
"""

from __future__ import annotations

from wit_world.imports.host import host_call, log

__all__ = ["LOG_LEVELS", "host_call", "log"]

LOG_LEVELS = {"trace": 0, "debug": 1, "info": 2, "warn": 3, "error": 4}
