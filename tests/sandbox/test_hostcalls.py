"""host_call dispatch order and the ops of minor 0, from real guests."""

from __future__ import annotations

import logging

import msgpack
import pytest

from wasmext import PluginError, Runtime
from wasmext.testing import DATA_AT, guest_wat, load_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
LOG = '(import "wasmext" "log" (func $log (param i32 i32 i32)))'


def forwarder(runtime: Runtime, request: object, **kwargs: object):  # type: ignore[no-untyped-def]
    """A guest that sends `request` and returns the host's answer as its response."""
    raw = request if isinstance(request, bytes) else msgpack.packb(request)
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    return load_wat(runtime, guest_wat(body, imports=HOST_CALL, data=raw), **kwargs)


@pytest.mark.parametrize(("request_", "code"), [
    (b"\xc1", "invalid"),
    ([1, 2], "invalid"),
    ({"op": 7}, "invalid"),
    ({"op": "no.such.op"}, "unsupported"),
    ({"op": "state.get", "key": "k"}, "denied"),
    ({"op": "config.get", "key": 5}, "invalid"),
    ({"op": "config.get", "key": "missing"}, "not_found"),
    ({"op": "secret.get", "key": "token"}, "denied"),
])
def test_error_answers(runtime: Runtime, request_: object, code: str) -> None:
    plugin = forwarder(runtime, request_)
    with pytest.raises(PluginError) as info:
        plugin.call("test")
    assert info.value.code == code


def test_granted_but_reserved_op_is_unsupported(runtime: Runtime) -> None:
    plugin = forwarder(runtime, {"op": "state.get", "key": "k"}, grants={"state"})
    with pytest.raises(PluginError) as info:
        plugin.call("test")
    assert info.value.code == "unsupported"


def test_config_get_reads_settings(runtime: Runtime) -> None:
    plugin = forwarder(runtime, {"op": "config.get", "key": "greeting"},
                       settings={"greeting": "Hallo"})
    assert plugin.call("test").value == "Hallo"
    everything = forwarder(runtime, {"op": "config.get"}, plugin_id="all",
                           settings={"a": 1, "b": [True]})
    assert everything.call("test").value == {"a": 1, "b": [True]}


def test_abi_info(runtime: Runtime) -> None:
    info = forwarder(runtime, {"op": "abi.info"}).call("test").value
    assert info["major"] == 1 and info["host"] == "wasmext"
    assert info["limits"]["fuel_per_call"] > 0


def test_handler_bug_answers_internal(runtime: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    def broken(ctx: object, req: object) -> None:
        raise RuntimeError("host bug")

    runtime.services.register("x.broken", broken, capability="")
    plugin = forwarder(runtime, {"op": "x.broken"})
    with caplog.at_level(logging.ERROR), pytest.raises(PluginError) as info:
        plugin.call("test")
    assert info.value.code == "internal"
    assert "x.broken" in caplog.text


def test_extension_ops_need_a_prefix(runtime: Runtime) -> None:
    with pytest.raises(ValueError, match="x\\."):
        runtime.services.register("mine", lambda ctx, req: None)


def test_log_is_bounded_and_sanitised(runtime: Runtime) -> None:
    text = b"line\x1b[31mred\r\nforged: INFO admin logged in" + b"A" * 5000
    body = f"""(call $log (i32.const 2) (i32.const {DATA_AT}) (i32.const {len(text)}))
      (i64.const 0)"""
    plugin = load_wat(runtime, guest_wat(body, imports=LOG, data=text),
                      limits={"max_log_line_bytes": 100, "max_log_lines": 3})
    for _ in range(5):
        plugin.call("test")
    lines = list(plugin.log.lines)
    assert len(lines) == 3 and plugin.log.dropped == 2
    for line in lines:
        assert "\x1b" not in line.text and "\n" not in line.text and "\r" not in line.text
        assert len(line.text.encode()) <= 100
        assert line.level == "info"


def test_log_op_redacts_secrets(runtime: Runtime, tmp_path: object) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path)) / "leaky"
    folder.mkdir()
    req = msgpack.packb({"op": "log", "level": "warn", "msg": "token is s3cr3t-value!"})
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))"
    (folder / "leaky.wasm").write_bytes(__import__("wasmtime").wat2wasm(
        guest_wat(body, imports=HOST_CALL, data=req)))
    (folder / "plugin.toml").write_text(
        'id = "leaky"\nversion = "1.0.0"\n[settings.token]\nsensitive = true\n')
    plugin = runtime.load(folder, settings={"token": "s3cr3t-value"})
    plugin.call("test")
    assert [ln.text for ln in plugin.log.lines] == ["token is ***!"]
    assert plugin.log.lines[0].level == "warn"
