"""A remote stage call's `WireSession` gives the plugin call what a `Session` made for
that call would: the same `meta.context` keys for a minor-1 plugin (its session id, the
request's trace id and tenant, the tool names for tool hooks), and a trace nobody reads."""

from __future__ import annotations

from typing import Any

from wasmext import Host, HostConfig
from wasmext.cluster.stagecall import WireSession
from wasmext.runtime import Runtime
from wasmext.session import Session


class _Tools:
    def __init__(self) -> None:
        self.tools = {"b": object(), "a": object()}


def test_a_wire_session_gives_the_hook_context_a_fresh_session_gives() -> None:
    with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        host_with_tools: Any = host
        wire, full = WireSession(host, "sid-1", "acme"), Session(host, "sid-1", {})
        full.context["tenant_id"] = "acme"
        for hook in ("pre", "validator", "tool_call"):
            got, want = wire.hook_context(hook), full.hook_context(hook)
            assert set(got) == set(want) and got["session_id"] == "sid-1"
            # The request's trace id (the session's id on the worker), not a fresh one.
            assert got["trace_id"] == "sid-1" and got["tenant_id"] == "acme"
            assert {k: v for k, v in got.items() if k != "trace_id"} == \
                {k: v for k, v in want.items() if k != "trace_id"}
        host_with_tools.tools = _Tools()
        assert wire.hook_context("tool_call")["tools"] == ["a", "b"] == \
            full.hook_context("tool_call")["tools"]
        assert "tools" not in wire.hook_context("pre")
        # Each call gets its own dict: a plugin call cannot change the next one's.
        assert wire.hook_context("pre") is not wire.hook_context("pre")
        # A tenant off the wire reaches the plugin only as a short printable id.
        for odd in ("t" * 129, "a\nb", "a\u202eb", "\x00"):
            assert WireSession(host, "sid-2", odd).hook_context("pre")["tenant_id"] is None
        assert WireSession(host, "sid-2", "t" * 128).hook_context("pre")["tenant_id"] == "t" * 128
        # What try_call notes goes nowhere, and a missing plugin is still an answer.
        assert host.try_call("missing", "pre", {}, wire) == (
            None, "plugin missing is not loaded")
        assert wire.state == {} and wire.otel_context is None


def test_session_ids_from_the_wire_stay_plain_only_when_short_and_plain() -> None:
    from wasmext.cluster.stagecall import session_id

    assert session_id("a" * 128) == "a" * 128
    for odd in ("a" * 129, "", "é" * 4, "٣٣", "a b", "a\u202eb"):  # long, empty, non-ASCII
        digest = session_id(odd)
        assert digest.startswith("trace-") and len(digest) == 38
    assert session_id("abc.1:x-y_z") == "abc.1:x-y_z"
