"""meta.context (SPEC 4.1, minor 1): what the host knows, in every hook call of a session."""

from __future__ import annotations

from typing import Any

import wasmtime

from wasmext import Host
from wasmext.testing import guest_wat, make_host

# Answers {"ok": true, "value": <the whole call request>}: the header sits just
# before 16400, the request is copied after it.
MIRROR = """(memory.copy (i32.const 16400) (local.get $p) (local.get $l))
  (i64.or (i64.shl (i64.const 16389) (i64.const 32))
          (i64.extend_i32_u (i32.add (local.get $l) (i32.const 11))))"""
HEADER = '(data (i32.const 16389) "\\82\\a2ok\\c3\\a5value")'


def mirror(host: Host, pid: str, minor: int | None) -> None:
    registration: dict[str, Any] = {"hooks": [{"hook": "on_plain_text"}, {"hook": "step"}]}
    if minor is not None:
        registration["abi_minor"] = minor
    wat = guest_wat(MIRROR, registration=registration, extra=HEADER)
    host.add(bytes(wasmtime.wat2wasm(wat)), plugin_id=pid)


def test_minor_1_plugins_get_the_context() -> None:
    with make_host() as host:
        mirror(host, "new", 1)
        host.tools.register_python("lookup", lambda args: args, description="d",
                                   input_schema={"type": "object"})
        with host.session("s-1") as s:
            s.context.update(tenant_id="acme", agent_name="helper", turn_id="turn-0")
            called, _ = host.try_call("new", "on_plain_text", "hi", s)
            assert called is not None
            request = called.value
            assert request["hook"] == "on_plain_text" and request["data"] == "hi"
            context = request["meta"]["context"]
            assert context == {"session_id": "s-1", "trace_id": s.context["trace_id"],
                               "turn_id": "turn-0", "tenant_id": "acme",
                               "agent_name": "helper"}
            assert len(context["trace_id"]) == 32
            step, _ = host.try_call("new", "step", {"x": 1}, s)
            assert step is not None and step.value["meta"]["context"]["tools"] == ["lookup"]


def test_minor_0_plugins_do_not() -> None:
    with make_host() as host:
        mirror(host, "old", None)
        with host.session("s-2") as s:
            called, _ = host.try_call("old", "on_plain_text", "hi", s)
        assert called is not None and called.value["meta"] == {"session": "s-2"}


def test_a_routers_in_process_stage_gets_the_runs_trace_and_tenant() -> None:
    """`Router.run` stages in-process get `meta.context` as a `Session.pipeline` stage
    does, with the run's trace id and tenant (what a remote stage's request carries);
    the session's own context is left as it was."""
    from wasmext import parse_policy
    from wasmext.cluster.routing import Router

    with make_host() as host:
        mirror(host, "stage", 1)
        router = Router(parse_policy({"pre": [{"id": "stage"}]}))
        with host.session("s-3") as s:
            s.context.update(agent_name="helper")
            before = dict(s.context)
            routed = router._routed(s, "acme", "trace-7", None)
            called, _ = host.try_call("stage", "on_plain_text", "hi", routed)
            assert called is not None
            assert called.value["meta"]["context"] == {
                "session_id": "s-3", "trace_id": "trace-7", "turn_id": None,
                "tenant_id": "acme", "agent_name": "helper"}
            assert s.context == before
            fresh = router._routed(s, "default", None, None).hook_context("pre")
            assert len(fresh["trace_id"]) == 32 and fresh["tenant_id"] == "default"
