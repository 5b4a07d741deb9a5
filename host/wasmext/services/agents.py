"""`agents.request` and `agents.send`: plugins calling agents the application registered.

    host.agents.register("reviewer", lambda text: review(text))        # a callable
    host.agents.register("helper", make_session, factory=True)         # a fresh session
                                                                       # (`.ask(input)`) per call
Grants: `agents` enables the ops; `agents:<pattern>` names the agents (fnmatch).
Only `turn` and `step` middleware may call them. Each call runs on a worker
thread, bounded by `timeout_ms` (default 15 s); as with middleware `next`, that
time is not charged to the calling plugin (its deadline restarts afterwards);
the chain of agents a call runs inside travels with it (a context variable),
so an agent that is already on the chain (a cycle) or a chain deeper than
`max_depth` is refused with `limit`. At most `max_in_flight` agent calls run
at once, host-wide: a storm of `agents.send` is refused, never queued.
"""

from __future__ import annotations

import contextvars
import fnmatch
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError

__all__ = ["AgentRegistry"]

log = logging.getLogger("wasmext.services.agents")

ALLOWED_HOOKS = frozenset({"turn", "step"})
_chain: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("wasmext_agent_chain",
                                                                         default=())


class AgentRegistry:
    """The agents one Host offers to plugins."""

    def __init__(self, *, default_timeout_ms: int = 15_000, max_depth: int = 4,
                 max_in_flight: int = 16) -> None:
        self.default_timeout_ms = default_timeout_ms
        self.max_depth = max_depth
        self._agents: dict[str, tuple[Callable[..., Any], bool]] = {}
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight,
                                        thread_name_prefix="wasmext-agent")

    def register(self, name: str, target: Callable[..., Any], *, factory: bool = False) -> None:
        """`target(input) -> answer`; with factory=True, `target()` makes a session whose
        `ask(input)` answers (closed afterwards when it has `close`)."""
        if not name or len(name) > 128:
            raise ValueError("an agent name is 1 to 128 characters")
        self._agents[name] = (target, factory)

    def unregister(self, name: str) -> None:
        self._agents.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._agents)

    def install(self, services: HostServices) -> None:
        services.register("agents.request", self.request)
        services.register("agents.send", self.send)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the ops -------------------------------------------------------------------

    def _target(self, ctx: CallContext, req: dict[str, Any]) -> tuple[str, Callable[..., Any],
                                                                      bool]:
        name = req.get("agent")
        if not isinstance(name, str) or "input" not in req:
            raise OpError("invalid", "agents.* needs 'agent' (a string) and 'input'")
        if ctx.hook not in ALLOWED_HOOKS:
            raise OpError("denied", f"agents.* is allowed in turn and step middleware, "
                          f"not in {str(ctx.hook)[:64]!r}")
        if not any(fnmatch.fnmatchcase(name, g[7:]) for g in ctx.grants
                   if g.startswith("agents:")):
            raise OpError("denied", f"agent {name[:64]!r} is not granted (needs "
                          "agents:<pattern>)")
        found = self._agents.get(name)
        if found is None:
            raise OpError("not_found", f"no agent {name[:64]!r} is registered")
        chain = _chain.get()
        if name in chain:
            raise OpError("limit", f"agent cycle: {' -> '.join((*chain, name))}")
        if len(chain) >= self.max_depth:
            raise OpError("limit", f"agent calls nested deeper than {self.max_depth}")
        return name, *found

    def _submit(self, name: str, target: Callable[..., Any], factory: bool,
                data: Any) -> Any:
        if not self._slots.acquire(blocking=False):
            raise OpError("limit", "too many agent calls in flight")
        chain = (*_chain.get(), name)

        def run() -> Any:
            try:
                _chain.set(chain)
                if not factory:
                    return target(data)
                session = target()
                try:
                    return session.ask(data)
                finally:
                    close = getattr(session, "close", None)
                    if callable(close):
                        close()
            finally:
                self._slots.release()

        try:
            return self._pool.submit(contextvars.copy_context().run, run)
        except RuntimeError:  # the pool was shut down
            self._slots.release()
            raise OpError("unavailable", "the host is closing") from None

    def request(self, ctx: CallContext, req: dict[str, Any]) -> Any:
        name, target, factory = self._target(ctx, req)
        timeout_ms = req.get("timeout_ms", self.default_timeout_ms)
        if type(timeout_ms) is not int or timeout_ms <= 0:
            raise OpError("invalid", "'timeout_ms' must be a positive int")
        # Like middleware `next`, the agent's time is not the plugin's: its deadline
        # restarts when the answer comes (CallContext.nested_seconds).
        wait = timeout_ms / 1000
        started = time.perf_counter()
        future = self._submit(name, target, factory, req["input"])
        try:
            return future.result(timeout=max(0.0, wait))
        except FutureTimeout:
            raise OpError("timeout", f"agent {name!r} did not answer in time") from None
        except OpError:
            raise
        except Exception as exc:
            log.warning("agent %s failed for plugin %s: %s", name, ctx.plugin_id, exc)
            raise OpError("failed", f"agent {name!r} failed: {type(exc).__name__}") from None
        finally:
            ctx.nested_seconds += time.perf_counter() - started  # the agent's time, not ours

    def send(self, ctx: CallContext, req: dict[str, Any]) -> None:
        name, target, factory = self._target(ctx, req)
        future = self._submit(name, target, factory, req["input"])

        def report(done: Any) -> None:
            exc = done.exception() if not done.cancelled() else None
            if exc is not None:
                log.warning("agent %s (sent by plugin %s) failed: %s", name, ctx.plugin_id,
                            exc)
        future.add_done_callback(report)
