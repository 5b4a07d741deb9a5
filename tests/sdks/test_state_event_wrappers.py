"""The state and event wrappers of every guest SDK, through its conformance plugin.

Hooks every conformance plugin has for this: `remember` (data: key → the SDK's
state-set wrapper stores the string "v:<key>", then its state-get wrapper reads
it back; both without naming a scope) and `announce` (data: topic → the SDK's
emit wrapper with the payload "hi"); each answers the host's whole answer map.
One default state scope across the SDKs: the session's.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from test_minor1_sdks import conformance_wasm

from support import SDK_LANGS
from wasmext import Host, HostConfig, Runtime

GRANTS = {"state", "events", "emit:conf.*"}


@pytest.mark.parametrize("lang", SDK_LANGS)
def test_state_wrappers_default_to_the_session_scope(lang: str, crt: Runtime) -> None:
    host = Host(HostConfig(state_backend="memory"), runtime=crt, plugin_dirs=[])
    try:
        plugin = host.add(conformance_wasm(lang), plugin_id=f"ops-{lang}", grants=GRANTS)

        def in_session(session: str | None, hook: str, data: Any) -> Any:
            return plugin.call(hook, data, meta={"session": session} if session else None).value

        assert in_session("s1", "remember", "colour") == {"ok": True, "value": "v:colour"}
        named = {"op": "state.get", "key": "colour", "scope": "session"}
        assert in_session("s1", "host", named) == {"ok": True, "value": "v:colour"}
        # Not the plugin-wide scope, and not another session's.
        shared = in_session("s1", "host", {**named, "scope": "plugin"})
        assert shared["error"]["code"] == "not_found"
        assert in_session("s2", "host", named)["error"]["code"] == "not_found"
        # Outside a session the session scope does not exist: the host refuses it.
        assert in_session(None, "remember", "colour")["error"]["code"] == "invalid"
    finally:
        host.close()


@pytest.mark.parametrize("lang", SDK_LANGS)
def test_emit_wrapper_reaches_a_subscriber_under_its_grant(lang: str, crt: Runtime) -> None:
    host = Host(HostConfig(state_backend="memory"), runtime=crt, plugin_dirs=[])
    got: list[tuple[str, Any, str | None]] = []
    arrived = threading.Event()
    host.observe.bus.subscribe("conf.*", lambda e: (got.append((e.topic, e.payload, e.source)),
                                                    arrived.set()))
    try:
        plugin = host.add(conformance_wasm(lang), plugin_id=f"emit-{lang}", grants=GRANTS)
        answer = plugin.call("announce", "conf.hello").value
        assert answer["ok"] is True
        assert arrived.wait(5)
        assert got == [("conf.hello", "hi", f"emit-{lang}")]
        denied = plugin.call("announce", "other.topic").value
        assert denied["error"]["code"] == "denied"
    finally:
        host.close()
