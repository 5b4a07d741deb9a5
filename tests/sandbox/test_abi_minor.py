"""ABI minors 1 and 2: the ops each adds answer only guests that negotiated it (SPEC 3.1).
Minor 3 adds no op (its answer region: tests/sandbox/test_answer_region.py)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from wasmext import PluginError, Runtime
from wasmext._abi import ABI_MINOR, OPS
from wasmext.sandbox.hostcalls import CallContext
from wasmext.testing import DATA_AT, guest_wat, load_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
MINOR_1_OPS = sorted(op for op, (_cap, since, _impl) in OPS.items() if since == 1)
NEWER_OPS = sorted(op for op, (_cap, since, _impl) in OPS.items() if since >= 1)


def forwarder(runtime: Runtime, request: dict[str, Any], minor: int | None,
              **kwargs: Any) -> Any:
    raw = msgpack.packb(request)
    registration: dict[str, Any] = {"hooks": [{"hook": "test"}]}
    if minor is not None:
        registration["abi_minor"] = minor
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    return load_wat(runtime, guest_wat(body, imports=HOST_CALL, data=raw,
                                       registration=registration), **kwargs)


def test_the_host_speaks_minor_3() -> None:
    assert ABI_MINOR == 3
    assert not [op for op in NEWER_OPS if OPS[op][1] == 3]
    assert {"http.fetch", "llm.complete", "agents.request", "agents.send"} <= set(MINOR_1_OPS)
    assert {op for op in NEWER_OPS if OPS[op][1] == 2} == {"metric.add", "metric.set",
                                                           "metric.observe", "tool.register"}


@pytest.mark.parametrize("op", NEWER_OPS)
@pytest.mark.parametrize("below", [None, 1])
def test_an_older_guest_sees_the_new_ops_as_unknown(runtime: Runtime, op: str,
                                                    below: int | None) -> None:
    since = OPS[op][1]
    minor = None if below is None else since - below  # None: no abi_minor at all (0)
    def served(ctx: CallContext, req: dict[str, Any]) -> str:
        return "served"

    runtime.services.register(op, served)
    cap = OPS[op][0]
    plugin = forwarder(runtime, {"op": op}, minor, grants={cap})
    with pytest.raises(PluginError) as info:
        plugin.call("test")
    assert info.value.code == "unsupported"
    assert f"needs ABI minor {since}" in info.value.message


@pytest.mark.parametrize("op", NEWER_OPS)
def test_a_guest_of_its_minor_reaches_them(runtime: Runtime, op: str) -> None:
    def served(ctx: CallContext, req: dict[str, Any]) -> str:
        return f"served {ctx.abi_minor}"

    runtime.services.register(op, served)
    cap, since = OPS[op][0], OPS[op][1]
    assert forwarder(runtime, {"op": op}, since, grants={cap}).call("test").value == \
        f"served {since}"
    ungranted = forwarder(runtime, {"op": op}, since, plugin_id="no-grant")
    if not cap:  # an op without a capability (progress, metric.*) needs no grant
        assert ungranted.call("test").value == f"served {since}"
        return
    with pytest.raises(PluginError) as info:
        ungranted.call("test")
    assert info.value.code == "denied"


def test_a_minor_0_guest_keeps_its_ops(runtime: Runtime) -> None:
    plugin = forwarder(runtime, {"op": "abi.info"}, None)
    assert plugin.call("test").value["minor"] == 0
    newer = forwarder(runtime, {"op": "abi.info"}, 7, plugin_id="newer")
    assert newer.call("test").value["minor"] == ABI_MINOR
    reads = forwarder(runtime, {"op": "config.get", "key": "k"}, 0, plugin_id="reads",
                      settings={"k": "v"})
    assert reads.call("test").value == "v"
