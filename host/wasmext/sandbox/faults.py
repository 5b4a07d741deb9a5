"""Naming what went wrong in a guest call: a wasmtime trap becomes a PluginFault."""

from __future__ import annotations

from collections.abc import Iterator

import wasmtime

from wasmext.errors import (
    Cancelled,
    GuestTrap,
    InstancePoolFull,
    MemoryLimitExceeded,
    OutOfFuel,
    PluginFault,
    StackOverflow,
    Timeout,
    WasmextError,
)
from wasmext.sandbox import callscope
from wasmext.sandbox.hostcalls import CallContext
from wasmext.sandbox.limits import Limits

__all__ = ["chained", "classify", "detached", "first_line", "timeout"]

# How wasmtime's pooling allocator words a pool with no free slot (instances,
# memories or tables).
POOL_FULL = "maximum concurrent limit of"


def chained(err: BaseException) -> Iterator[BaseException]:
    """`err` and every exception it was raised from or while handling, each once."""
    chain: list[BaseException | None] = [err]
    seen: set[int] = set()
    while chain:
        exc = chain.pop()
        if exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            yield exc
            chain += (exc.__cause__, exc.__context__)


def detached(err: WasmextError) -> WasmextError:
    """`err` without the tracebacks of it and what it was raised from, for an error the
    host keeps (a load error, a call's reason, the host trouble a call met). Their frames,
    and every frame above them once it returned, would keep what they held as long as the
    error is kept: a plugin, its compiled module and bytes, an instance and its pool
    slot."""
    for exc in chained(err):
        exc.__traceback__ = None
    return err


def first_line(exc: BaseException) -> str:
    """The cause of a trap in one line, without wasmtime's backtrace."""
    msg = exc.message if isinstance(exc, wasmtime.Trap) else str(exc)
    _, caused, cause = msg.partition("Caused by:")
    lines = [ln.strip() for ln in (cause if caused else msg).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def timeout(what: str, limits: Limits, ctx: CallContext, clamped: bool) -> PluginFault:
    """A Timeout; `clamped`: the deadline was the calling plugin's (inherited).

    A call whose scope was cancelled (its deadline was moved to the past for
    that) is `Cancelled` instead: the plugin did not run too long.
    """
    scope = callscope.current()
    if scope is not None and scope.cancelled.is_set():
        return Cancelled(f"{what} was cancelled by its caller", plugin_id=ctx.plugin_id,
                         hook=ctx.hook)
    if not clamped:
        return Timeout(f"{what} ran past {limits.timeout_ms} ms", plugin_id=ctx.plugin_id,
                       hook=ctx.hook)
    err = Timeout(f"{what} ran past its caller's deadline (a nested call gets only what is "
                  "left of its caller's time)", plugin_id=ctx.plugin_id, hook=ctx.hook)
    err.inherited = True
    return err


def classify(exc: BaseException, what: str, limits: Limits, ctx: CallContext,
             at_memory_cap: bool, clamped: bool) -> WasmextError:
    """The named error for `exc`, raised by the guest export `what`."""
    pid, hook = ctx.plugin_id, ctx.hook
    if isinstance(exc, WasmextError):
        return exc
    if isinstance(exc, wasmtime.Trap):
        code = exc.trap_code
        if code == wasmtime.TrapCode.OUT_OF_FUEL:
            return OutOfFuel(f"used all {limits.fuel_per_call} fuel in {what}",
                             plugin_id=pid, hook=hook)
        if code == wasmtime.TrapCode.INTERRUPT:
            return timeout(what, limits, ctx, clamped)
        if code == wasmtime.TrapCode.STACK_OVERFLOW:
            return StackOverflow(f"wasm stack exhausted in {what}", plugin_id=pid, hook=hook)
    text = first_line(exc)
    if what == "instantiate" and not isinstance(exc, wasmtime.Trap) and \
            text.startswith(POOL_FULL):
        # wasmtime's pooling allocator had no free slot: the host's capacity.
        # The operator's way out is in the line: the pool is theirs to size.
        return InstancePoolFull(f"no free instance slot ({text}): more instances alive "
                                "at once than [host] instance_pool allows; raise it, or "
                                "set it to 0 to map each instance on demand",
                                plugin_id=pid, hook=hook)
    if at_memory_cap:
        return MemoryLimitExceeded(f"{what} failed at the {limits.memory_bytes}-byte "
                                   f"memory cap ({text})", plugin_id=pid, hook=hook)
    if ("memory" in text or "table" in text) and ("exceeds" in text or "minimum" in text):
        return MemoryLimitExceeded(f"{what}: {text}", plugin_id=pid, hook=hook)
    return GuestTrap(f"{what}: {text}", plugin_id=pid, hook=hook)
