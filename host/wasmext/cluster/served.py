"""The worker's side of a whole plugin served over NATS: its advert and its calls.

A worker serves every loaded plugin on `<prefix>.plugin.<id>.v<major>` (`.describe`,
`.call`, `.cancel`; `cluster.contract`). `advert` is the plugin's registration as the
guest answered it (after the worker's own checks), for a caller to check again and
register a proxy with (`cluster.plugins`). `call` runs one hook exactly as `Plugin.call`
does in-process, inside the caller's call tree (the deadline and host calls it has left
are the root frame), under a `CallScope` that the caller's cancel reaches, and with its
state commit made at most once per call id; the outcome, a result or the failure's
kind and reason, goes back as a `PluginAnswer`, with the denials of the plugin's host
calls when the caller asked for them (`denials_watched`: the first of each op, at most
`DENIALS_PER_CALL`, cleaned and cut, the plugin's secret settings redacted).

A middleware guest's `next` (the host's inner layers) cannot run here: the layers are
the caller's. `install_next` wraps the worker's `next` op so that, inside a call whose
caller named a callback inbox, it is sent there and the caller's answer is the op's
(its time credited back to the guest, as in-process); anywhere else the local op runs.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wasmext.cluster.contract import (
    MSGPACK,
    ContractError,
    DenialNotice,
    NextRequest,
    PluginAdvert,
    PluginAnswer,
    PluginCall,
    decode,
    encode,
)
from wasmext.errors import (
    Cancelled,
    InstancePoolFull,
    PluginError,
    PluginFault,
    Quarantined,
    StateUnavailable,
    WasmextError,
)
from wasmext.sandbox import calltree
from wasmext.sandbox.callscope import CallScope
from wasmext.sandbox.hostcalls import (
    CallContext,
    DenialSeen,
    HostServices,
    OpError,
    denials_watched,
)
from wasmext.services.state import applying
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.host import Host
    from wasmext.services.hostview import LoadedPlugin

__all__ = ["CALLBACK_RE", "MAX_HOOK_CHARS", "Callback", "advert", "call", "install_next"]

MAX_HOOK_CHARS = 128
# A caller's callback inbox: a plain subject (no wildcard), as nats-py's inboxes are.
CALLBACK_RE = re.compile(r"[A-Za-z0-9_-]{1,64}(?:\.[A-Za-z0-9_-]{1,64}){1,7}")
# Sends an encoded NextRequest to the caller and returns its encoded answer.
Callback = Callable[[bytes], bytes]


class _Bound(threading.local):
    plugin_id: str | None = None
    callback: Callback | None = None


_bound = _Bound()


def install_next(services: HostServices) -> None:
    """Have `next` go back to the caller inside a served call that has a callback."""
    local = services.handler("next")

    def next_op(ctx: CallContext, req: dict[str, Any]) -> Any:
        send = _bound.callback
        if send is None or ctx.plugin_id != _bound.plugin_id:
            if local is None:
                raise OpError("unsupported", "next is not offered here")
            return local(ctx, req)
        body = {k: v for k, v in req.items() if k != "op"}
        started = time.perf_counter()
        try:
            raw = send(encode(NextRequest(body), MSGPACK))
        finally:
            ctx.nested_seconds += time.perf_counter() - started  # the caller's layers' time
        try:
            answer = decode(raw, PluginAnswer, MSGPACK, peer="the caller's next")
        except ContractError as err:
            raise OpError("failed", err.message) from None
        if not answer.ok:
            raise OpError(clean(answer.code, 64) or "failed", clean(answer.message, 300))
        return answer.value
    services.register("next", next_op)


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
         key: str | None, scope: CallScope, callback: Callback | None = None,
         notices: bool = False) -> bytes:
    """Run one `PluginCall` of `plugin_id` (ContractError: `raw` is not one); a guest's
    `next` goes to `callback` (install_next); `notices`: the answer carries the call's
    denials (the caller reads them)."""
    request = decode(raw, PluginCall, MSGPACK, peer=f"call for {plugin_id}")
    lp = host.plugins.get(plugin_id)
    if lp is None:  # unloaded meanwhile: its endpoint goes with the next resync
        return encode(PluginAnswer(False, kind="fault", reason="remote unavailable",
                                   message=f"plugin {plugin_id} is not loaded here"), MSGPACK)
    hook = clean(request.hook, MAX_HOOK_CHARS)
    if lp.reload_after and time.monotonic() < lp.reload_after:  # its `reload` policy here
        return encode(PluginAnswer(False, kind="quarantined",
                                   message="skipped: reload backoff"), MSGPACK)
    meta: dict[str, Any] = {"session": None if request.session is None
                            else clean(request.session, 256)}
    if request.context is not None:
        meta["context"] = request.context
    if root is not None:
        calltree.push(root)
    _bound.plugin_id, _bound.callback = plugin_id, callback
    seen: list[DenialSeen] = []
    try:
        with scope.bound(), (applying(key) if key else contextlib.nullcontext()), \
                (denials_watched(plugin_id) if notices else contextlib.nullcontext(seen)) \
                as seen:
            if scope.cancelled.is_set():  # given up while it waited for a thread
                raise Cancelled(f"plugin {plugin_id} hook {hook}: cancelled before it ran",
                                plugin_id=plugin_id, hook=hook)
            result = lp.plugin.call(hook, request.data, meta)
        answer = PluginAnswer(True, result.value, result.changed, result.stop, result.fuel)
    except Quarantined as err:
        answer = PluginAnswer(False, kind="quarantined", message=err.message)
    except StateUnavailable as err:  # the worker's storage: never the plugin's fault
        answer = PluginAnswer(False, kind="state", message=err.message)
    except InstancePoolFull as err:
        # The worker's capacity, never the plugin's fault: a guest `error` to a caller that
        # reads no more (as before), the host's limit to one that reads `reason` (a guest's
        # own error never carries one).
        answer = PluginAnswer(False, kind="error", code="failed", reason=err.reason,
                              message=err.message)
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
        _bound.plugin_id, _bound.callback = None, None
        if root is not None:
            calltree.pop()
    if seen:
        answer.denials = [DenialNotice(d.op, d.message, d.capability) for d in seen]
    try:
        return encode(answer, MSGPACK)
    except (TypeError, ValueError, OverflowError):  # a value MessagePack cannot carry
        return encode(PluginAnswer(False, kind="fault", reason="invalid output",
                                   message="the answer cannot be sent as MessagePack"),
                      MSGPACK)
