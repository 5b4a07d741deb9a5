"""A routing policy with tenants, run with some stages remote.

    {"policy_id": "support_en", "pre": [...], "validators": [...], "providers": [...],
     "post": [...],
     "tenants": {"acme": {"disable": ["pii_guard"],                 # feature flags
                          "config": {"normalize_text": {"lowercase": false}}},
                 "beta": {"policy": {"policy_id": "beta", "pre": [...]}}}}

The stages and their rules are `wasmext.hooks.pipeline`'s (a document is `RoutingDoc`:
`PolicyDoc` and its tenants, one ConfigError naming every problem), unchanged:
`Router.run` hands the pipeline a session whose host answers `try_call` for a
registered extension over NATS (`RemoteCaller`) and for anything else in-process.
`Router.arun` is the same for an async caller: remote stages are awaited on its loop
(over a link opened there with `NatsLink.open`, no thread hop at all), in-process
stages run on wasmext's call pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from wasmext.callpool import call_pool
from wasmext.cluster import notices
from wasmext.cluster.callids import CallIds
from wasmext.cluster.registry import RemoteExtension
from wasmext.errors import ConfigError
from wasmext.hooks.context import HookHost, HookSession, TraceNotes
from wasmext.hooks.ordering import Entry
from wasmext.hooks.pipeline import (
    PipelineResult,
    Policy,
    PolicyDoc,
    StageRef,
    arun_pipeline,
    run_pipeline,
)
from wasmext.ids import random_hex
from wasmext.sandbox import calltree
from wasmext.sandbox.hostcalls import HostServices
from wasmext.sandbox.instance import CallResult
from wasmext.services.events import Observer
from wasmext.services.hostview import LoadedPlugin
from wasmext.validation import SECTION, check

if TYPE_CHECKING:
    from wasmext.cluster.remote import RemoteCaller
    from wasmext.errors import WasmextError

__all__ = ["CallIds", "Router", "Routing", "RoutingDoc", "TenantTable", "parse_routing"]


@dataclass(frozen=True)
class Routing:
    """The pipeline policy for each tenant, and the default."""

    default: Policy
    tenants: Mapping[str, Policy]

    def for_tenant(self, tenant_id: str) -> Policy:
        """The tenant's policy, or the default."""
        return self.tenants.get(tenant_id, self.default)

    def stage_ids(self) -> set[str]:
        """Every stage id the default policy or a tenant's names."""
        policies = (self.default, *self.tenants.values())
        return {ref.id for p in policies for ref in (*p.pre, *p.validators, *p.post)} | {
            ref.id for p in policies for ref in p.providers}


class TenantTable(BaseModel):
    """One tenant's override: its own policy, stages switched off, stage config merged."""

    model_config = SECTION

    policy: PolicyDoc | None = None
    disable: list[str] = []
    config: dict[str, dict[str, Any]] = {}

    def over(self, base: Policy) -> Policy:
        """`base` (or the tenant's own policy) with the override applied."""
        policy = self.policy.policy() if self.policy is not None else base
        off, config = set(self.disable), self.config

        def keep(refs: tuple[StageRef, ...]) -> tuple[StageRef, ...]:
            return tuple(replace(r, config={**r.config, **config.get(r.id, {})})
                         for r in refs if r.id not in off)
        return Policy(policy.policy_id, keep(policy.pre), keep(policy.validators),
                      tuple(replace(p, parameters={**p.parameters, **config.get(p.id, {})})
                            for p in policy.providers if p.id not in off), keep(policy.post))


class RoutingDoc(PolicyDoc):
    """A policy document with an optional `tenants` map of overrides."""

    tenants: dict[str, TenantTable] = Field(default_factory=dict)


def parse_routing(raw: Any) -> Routing:
    """A policy document, with an optional `tenants` map of overrides."""
    doc = check(RoutingDoc, raw, prefix="policy", source="")
    default = doc.policy()
    return Routing(default, {t: tenant.over(default) for t, tenant in doc.tenants.items()})


class _RoutedHost:
    """The session host for one run: registered extensions remote, the rest in-process."""

    def __init__(self, host: HookHost, caller: RemoteCaller | None, ids: CallIds) -> None:
        self._host, self._caller, self._ids = host, caller, ids

    @property
    def ids(self) -> CallIds:
        """The run's ids and budget, as its remote calls carry them."""
        return self._ids

    @property
    def plugins(self) -> Mapping[str, LoadedPlugin]:
        return self._host.plugins

    @property
    def observe(self) -> Observer:
        return self._host.observe

    def ordered(self, hook: str) -> list[Entry]:
        return self._host.ordered(hook)

    def call(self, entry: Entry, data: Any, session: HookSession | None = None
             ) -> CallResult | None:
        return self._host.call(entry, data, session)

    def record_fault(self, lp: LoadedPlugin, hook: str, err: WasmextError) -> None:
        self._host.record_fault(lp, hook, err)

    def try_call(self, plugin_id: str, hook: str, data: Any,
                 session: HookSession | None = None
                 ) -> tuple[CallResult | None, str | None]:
        ext = self.remote(plugin_id)
        if ext is None or self._caller is None:
            return self._host.try_call(plugin_id, hook, data, session)
        answer, error = (self._caller.call(ext, data, self._ids) if ext.type == hook
                         else (None, None))
        return self.outcome(ext, hook, answer, error, session)

    async def atry_call(self, plugin_id: str, hook: str, data: Any,
                        session: HookSession | None = None
                        ) -> tuple[CallResult | None, str | None]:
        """`try_call` awaited: a remote stage over the link, in-process on the call pool."""
        caller = self._caller
        ext = caller.registry.get(plugin_id) if caller is not None else None
        if ext is None or caller is None:
            return await call_pool().submit(  # type: ignore[no-any-return]
                asyncio.get_running_loop(), self._host.try_call, plugin_id, hook, data, session)
        answer, error = (await caller.acall(ext, data, self._ids) if ext.type == hook
                         else (None, None))
        return self.outcome(ext, hook, answer, error, session)

    def remote(self, plugin_id: str) -> RemoteExtension | None:
        """The registered extension `plugin_id` is, if it is one."""
        return self._caller.registry.get(plugin_id) if self._caller else None

    @staticmethod
    def outcome(ext: RemoteExtension, hook: str, answer: Any, error: str | None,
                session: HookSession | None) -> tuple[CallResult | None, str | None]:
        """A remote call's answer as `try_call` gives it, noted in the trace."""
        if ext.type != hook:
            error = f"extension {ext.id} is a {ext.type}, not a {hook}"
        elif error is None:
            if session is not None:
                session.trace.note(hook, "changed", "remote", ext.id)
            return CallResult(answer, True), None
        if session is not None:
            session.trace.note(hook, "failed", error, ext.id)
        return None, error or "failed"


@dataclass
class _RoutedSession:
    id: str
    state: dict[str, Any]
    trace: TraceNotes
    host: _RoutedHost

    session: HookSession

    def stage(self, plugin_id: str, hook: str, data: dict[str, Any]
              ) -> Awaitable[tuple[CallResult | None, str | None]]:
        """One stage of `arun`, awaited by the pipeline (no coroutine of its own)."""
        return self.host.atry_call(plugin_id, hook, data, self)

    def hook_context(self, hook: str) -> dict[str, Any]:
        """`meta.context` of an in-process stage (SPEC 4.1): the session's, with the
        run's trace id and tenant, as a remote stage's request carries them."""
        own = getattr(self.session, "hook_context", None)
        context: dict[str, Any] = dict(own(hook)) if own is not None else {
            "session_id": self.id, "turn_id": None, "agent_name": None}
        ids = self.host.ids
        context["trace_id"], context["tenant_id"] = ids.trace_id, ids.tenant_id
        return context


class Router:
    """Runs a routing policy for a tenant, each stage in-process or remote by the registry."""

    def __init__(self, routing: Routing | Policy, caller: RemoteCaller | None = None) -> None:
        self.routing = routing if isinstance(routing, Routing) else Routing(routing, {})
        self.caller = caller
        registry: Mapping[str, RemoteExtension] = caller.registry if caller else {}
        for policy in (self.routing.default, *self.routing.tenants.values()):
            for kind, refs in (("pre", policy.pre), ("validator", policy.validators),
                               ("post", policy.post)):
                for ref in refs:
                    ext = registry.get(ref.id)
                    if ext is not None and ext.type != kind:
                        raise ConfigError(f"policy {policy.policy_id}: {ref.id} is registered "
                                          f"as a {ext.type}, used as a {kind}")

    def run(self, session: HookSession, payload: str, context: Mapping[str, Any] | None = None,
            *, tenant_id: str = "default", trace_id: str | None = None,
            provider: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
            budget_ms: int | None = None,
            part: Literal["all", "input", "output"] = "all") -> PipelineResult:
        """Run the tenant's policy on `payload`. Remote stages get no more time than
        `budget_ms` from now, nor than the plugin call this run happens inside has left
        (its host calls left go along too): no attempt starts, and no worker runs one,
        after that. `part`: all of the policy, only what runs on a user's input (pre,
        validators, providers), or only what runs on an answer (post)."""
        routed = self._routed(session, tenant_id, trace_id, budget_ms)
        return run_pipeline(routed, self._policy(tenant_id, part), payload,
                            dict(context or {}), provider)

    async def arun(self, session: HookSession, payload: str,
                   context: Mapping[str, Any] | None = None, *, tenant_id: str = "default",
                   trace_id: str | None = None,
                   provider: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                   budget_ms: int | None = None,
                   part: Literal["all", "input", "output"] = "all") -> PipelineResult:
        """`run` for an async caller: remote stages awaited (no thread blocked, and none
        at all over a link made by `NatsLink.open` on this loop), in-process stages on
        wasmext's call pool. `provider` runs on the loop."""
        routed = self._routed(session, tenant_id, trace_id, budget_ms)
        return await arun_pipeline(routed, self._policy(tenant_id, part), payload,
                                   dict(context or {}), routed.stage, provider)

    def _policy(self, tenant_id: str, part: Literal["all", "input", "output"]) -> Policy:
        policy = self.routing.for_tenant(tenant_id)
        if part == "input":
            policy = replace(policy, post=())
        elif part == "output":
            policy = Policy(policy.policy_id, post=policy.post)
        return policy

    @staticmethod
    def _note(session: HookSession) -> notices.Note | None:
        """How this run notes the host ops a worker denied a remote stage: as the session's
        host notes its own (None: a host without an op table, which notes nothing)."""
        services = getattr(getattr(session.host, "runtime", None), "services", None)
        if not isinstance(services, HostServices):
            return None
        session_id = session.id

        def note(ext_id: str, worker: str, denials: Iterable[notices.Denial]) -> None:
            # The worker's plugin is named in its text; the grant it lacks is its host's
            # to give, under that plugin's id: no command here names it.
            notices.note(services, ext_id, session_id, worker,
                         ((op, message, None) for op, message, _ in denials))
        return note

    def _routed(self, session: HookSession, tenant_id: str, trace_id: str | None,
                budget_ms: int | None) -> _RoutedSession:
        deadline: float | None = None
        if budget_ms is not None:
            deadline = time.monotonic() + budget_ms / 1000
        frame = calltree.current()
        if frame is not None:
            deadline = frame.deadline if deadline is None else min(deadline, frame.deadline)
        ids = CallIds(trace_id or random_hex(), tenant_id, deadline,
                      frame.calls_left if frame is not None else None,
                      self._note(session) if self.caller is not None else None)
        return _RoutedSession(session.id, session.state, session.trace,
                              _RoutedHost(session.host, self.caller, ids), session)
