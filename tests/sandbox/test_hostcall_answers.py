"""The host-call answer path: `dispatch_packed` is byte for byte `encode(dispatch(...))`.

The instance encodes an answer without building the `{"ok", "value"}` map, with a
Packer it reuses; whatever a guest asks, the bytes it gets back are the ones the
generic path gives, and a value MessagePack cannot carry is an EncodeError, as
before. Host-call metrics bound once per (plugin, op) still count every call.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext.errors import EncodeError
from wasmext.observe.metrics import Metrics
from wasmext.sandbox.codec import encode
from wasmext.sandbox.hostcalls import CallContext, HostServices
from wasmext.sandbox.pluginlog import PluginLog


def _services() -> HostServices:
    services = HostServices()
    services.register("x.echo", lambda ctx, req: req.get("value"), capability="")
    services.register("x.object", lambda ctx, req: object(), capability="")
    services.register("x.boom", lambda ctx, req: 1 // 0, capability="")
    return services


def _ctx(minor: int = 1) -> CallContext:
    return CallContext("p", frozenset({"state"}), {"greeting": "hi", "key": "s3cret"},
                       frozenset({"key"}), PluginLog("p", 10, 100), minor)


REQUESTS: list[Any] = [
    {"op": "config.get", "key": "greeting"}, {"op": "config.get"},
    {"op": "config.get", "key": "key"}, {"op": "config.get", "key": "missing"},
    {"op": "secret.get", "key": "key"}, {"op": "abi.info"}, {"op": "nope"},
    {"op": "http.fetch", "url": "http://example.com/"}, {"op": 3}, [1, 2], "text",
    {"op": "x.echo", "value": {"nested": [1, 2.5, None, True, b"raw"]}},
    {"op": "x.echo", "value": 2**64 - 1}, {"op": "x.boom"}, {"op": "log", "msg": "hi"},
]


@pytest.mark.parametrize("request_", REQUESTS, ids=repr)
@pytest.mark.parametrize("minor", [0, 1])
def test_packed_answers_equal_the_generic_path(request_: Any, minor: int) -> None:
    services, raw = _services(), msgpack.packb(request_)
    pack = msgpack.Packer(use_bin_type=True).pack
    generic = encode(services.dispatch(_ctx(minor), raw, 64))
    assert services.dispatch_packed(_ctx(minor), raw, 64, pack) == generic
    assert msgpack.unpackb(generic)["ok"] in (True, False)


@given(st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
                    | st.text(max_size=20) | st.binary(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20))
@settings(max_examples=200, deadline=None)
def test_any_echoed_value_packs_as_the_generic_path(value: Any) -> None:
    services = _services()
    raw = msgpack.packb({"op": "x.echo", "value": value})
    pack = msgpack.Packer(use_bin_type=True).pack
    assert services.dispatch_packed(_ctx(), raw, 64, pack) == \
        encode(services.dispatch(_ctx(), raw, 64))


def test_an_unencodable_answer_is_an_encode_error_and_the_packer_recovers() -> None:
    services = _services()
    pack = msgpack.Packer(use_bin_type=True).pack
    with pytest.raises(EncodeError):
        services.dispatch_packed(_ctx(), msgpack.packb({"op": "x.object"}), 64, pack)
    with pytest.raises(EncodeError):
        encode(services.dispatch(_ctx(), msgpack.packb({"op": "x.object"}), 64))
    raw = msgpack.packb({"op": "x.echo", "value": "after"})
    assert msgpack.unpackb(services.dispatch_packed(_ctx(), raw, 64, pack)) == \
        {"ok": True, "value": "after"}


def test_host_call_metrics_count_every_call_and_forget_unbinds() -> None:
    metrics = Metrics()
    services = _services()
    services.observer = metrics.record_host_call
    raw = msgpack.packb({"op": "config.get", "key": "greeting"})
    for _ in range(3):
        services.dispatch(_ctx(), raw, 64)
    assert metrics.snapshot()["p"]["host_calls"] == 3
    text = metrics.exposition().decode()
    assert 'extension_host_calls_total{extension_id="p",op="config.get"} 3.0' in text
    metrics.forget("p")
    services.dispatch(_ctx(), raw, 64)
    assert metrics.snapshot()["p"]["host_calls"] == 1  # a new summary after forget
    assert 'extension_host_calls_total{extension_id="p",op="config.get"} 4.0' in \
        metrics.exposition().decode()
