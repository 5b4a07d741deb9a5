"""Layer 2: the host's services as Python functions that return values or raise.

`request` sends a raw host-call map and returns the host's whole answer map;
every other function sends one op and returns its value, raising `HostError`
(with the ABI error code) when the host says no.
"""

from __future__ import annotations

from typing import Any

from wasmext_guest import raw
from wasmext_guest.msgpack import MsgpackError, pack, unpack

__all__ = ["HostError", "call", "config", "emit", "log", "request", "secret", "state_delete",
           "state_get", "state_keys", "state_set"]

_MISSING: Any = object()


class HostError(Exception):
    """The host answered an op with an error: `code` is the ABI error code."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


def request(req: dict[str, Any]) -> dict[str, Any]:
    """The host's answer map to the host-call map `req`, as it came."""
    try:
        answer = unpack(raw.host_call(pack(req)))
    except MsgpackError as exc:
        raise HostError("internal", f"unreadable host answer: {exc}") from exc
    if not isinstance(answer, dict) or type(answer.get("ok")) is not bool:
        raise HostError("internal", "the host answer is not an ABI v1 answer map")
    return answer


def call(op: str, **args: Any) -> Any:
    """The value of `op` with `args`; HostError when the host refuses."""
    answer = request({"op": op, **args})
    if answer["ok"]:
        return answer.get("value")
    error = answer.get("error")
    if not isinstance(error, dict):
        raise HostError("internal", "a failed host answer without an error map")
    message = error.get("message")
    raise HostError(str(error.get("code", "internal")),
                    message if isinstance(message, str) else "")


def config(key: str, default: Any = _MISSING) -> Any:
    """The setting `key`; `default` when it is not set (else HostError not_found)."""
    try:
        return call("config.get", key=key)
    except HostError as err:
        if err.code == "not_found" and default is not _MISSING:
            return default
        raise


def secret(key: str) -> Any:
    """A sensitive setting (needs the `secrets` grant)."""
    return call("secret.get", key=key)


def state_get(key: str, default: Any = _MISSING, scope: str = "session") -> Any:
    """A value this plugin stored (needs `state`). `scope` is "session" (the default in
    every SDK and the host: this session's value) or "plugin" (shared by the plugin's
    sessions; the only scope a call outside a session may use)."""
    try:
        return call("state.get", key=key, scope=scope)
    except HostError as err:
        if err.code == "not_found" and default is not _MISSING:
            return default
        raise


def state_set(key: str, value: Any, scope: str = "session", ttl: int | None = None) -> None:
    args: dict[str, Any] = {"key": key, "value": value, "scope": scope}
    if ttl is not None:
        args["ttl"] = ttl
    call("state.set", **args)


def state_delete(key: str, scope: str = "session") -> bool:
    return bool(call("state.delete", key=key, scope=scope))


def state_keys(prefix: str = "", scope: str = "session") -> list[str]:
    return list(call("state.keys", prefix=prefix, scope=scope))


def emit(topic: str, payload: Any = None) -> int:
    """Publish an event (needs `events` and an `emit:<pattern>` grant)."""
    return int(call("event.emit", topic=topic, payload=payload))


def log(text: str, level: str = "info") -> None:
    """One line in the plugin log, through the direct `log` import."""
    raw.log(raw.LOG_LEVELS.get(level, 2), text)
