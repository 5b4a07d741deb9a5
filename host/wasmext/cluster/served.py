"""The worker's side of a whole plugin served over NATS: its advert and its calls.

A worker serves every loaded plugin on `<prefix>.plugin.<id>.v<major>` (`.describe`,
`.call`, `.cancel`; `cluster.contract`). `advert` is the plugin's registration as the
guest answered it (after the worker's own checks), for a caller to check again and
register a proxy with (`cluster.plugins`). `call` runs one hook exactly as `Plugin.call`
does in-process, inside the caller's call tree (the deadline and host calls it has left
are the root frame), under a `CallScope` that the caller's cancel reaches, and with its
state commit made at most once per call id; the outcome, a result or the failure's
kind and reason, goes back as a `PluginAnswer`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from wasmext.cluster.contract import (
    MSGPACK,
    PluginAdvert,
    PluginAnswer,
    PluginCall,
    decode,
    encode,
)
from wasmext.errors import (
    Cancelled,
    PluginError,
    PluginFault,
    Quarantined,
    StateUnavailable,
    WasmextError,
)
from wasmext.sandbox import calltree
from wasmext.sandbox.callscope import CallScope
from wasmext.services.state import applying
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.host import Host
    from wasmext.services.hostview import LoadedPlugin

__all__ = ["MAX_HOOK_CHARS", "advert", "call"]

MAX_HOOK_CHARS = 128


def advert(lp: LoadedPlugin, version: str) -> bytes:
    """The plugin's registration map, as the caller will check it."""
    reg = lp.plugin.registration
    raw: dict[str, Any] = {
        "hooks": [{"hook": h.hook, "priority": h.priority,
                   **({"pattern": h.pattern} if h.pattern is not None else {})}
                  for h in reg.hooks],
        "abi_minor": reg.abi_minor, **dict(reg.extra)}
    if reg.name is not None:
        raw["name"] = reg.name
    if reg.version is not None:
        raw["version"] = reg.version
    description = lp.manifest.description if lp.manifest else ""
    return encode(PluginAdvert(lp.id, version, raw, clean(description or "", 200)), MSGPACK)


def call(host: Host, plugin_id: str, raw: bytes, root: calltree.Frame | None,
         key: str | None, scope: CallScope) -> bytes:
    """Run one `PluginCall` of `plugin_id` (ContractError: `raw` is not one)."""
    request = decode(raw, PluginCall, MSGPACK, peer=f"call for {plugin_id}")
    lp = host.plugins.get(plugin_id)
    if lp is None:  # unloaded meanwhile: its endpoint goes with the next resync
        return encode(PluginAnswer(False, kind="fault", reason="remote unavailable",
                                   message=f"plugin {plugin_id} is not loaded here"), MSGPACK)
    hook = clean(request.hook, MAX_HOOK_CHARS)
    meta: dict[str, Any] = {"session": None if request.session is None
                            else clean(request.session, 256)}
    if request.context is not None:
        meta["context"] = request.context
    if root is not None:
        calltree.push(root)
    try:
        with scope.bound(), (applying(key) if key else contextlib.nullcontext()):
            if scope.cancelled.is_set():  # given up while it waited for a thread
                raise Cancelled(f"plugin {plugin_id} hook {hook}: cancelled before it ran",
                                plugin_id=plugin_id, hook=hook)
            result = lp.plugin.call(hook, request.data, meta)
        answer = PluginAnswer(True, result.value, result.changed, result.stop, result.fuel)
    except Quarantined as err:
        answer = PluginAnswer(False, kind="quarantined", message=err.message)
    except StateUnavailable as err:  # the worker's storage: never the plugin's fault
        answer = PluginAnswer(False, kind="state", message=err.message)
    except PluginFault as err:
        if not getattr(err, "inherited", False):
            host.record_fault(lp, hook, err)
        answer = PluginAnswer(False, kind="fault", reason=err.reason, message=err.message)
    except PluginError as err:
        host.record_fault(lp, hook, err)
        answer = PluginAnswer(False, kind="error", code=err.code, message=err.message,
                              suggestion=err.suggestion, help_url=err.help_url)
    except WasmextError as err:  # the host's own refusal (input too large, ...)
        answer = PluginAnswer(False, kind="error", code="failed", message=err.describe())
    finally:
        if root is not None:
            calltree.pop()
    try:
        return encode(answer, MSGPACK)
    except (TypeError, ValueError, OverflowError):  # a value MessagePack cannot carry
        return encode(PluginAnswer(False, kind="fault", reason="invalid output",
                                   message="the answer cannot be sent as MessagePack"),
                      MSGPACK)
