"""JSON payloads for components that ask for them (abi/SPEC.md section 8): the JavaScript
SDK gets JSON requests where JSON carries them exactly and MessagePack otherwise; a
hostile guest's JSON answers end in named errors within a time bound, and the plugin
answers afterwards; guests that do not ask are sent MessagePack as before."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import pytest

from support import Built
from wasmext import InvalidOutput, PluginError, Runtime
from wasmext.testing import DATA_AT, guest_wat, load_wat, packed

BOUND_S = 10.0  # generous: the machine running CI is shared
# The hostile JavaScript component is built for these tests alone, about a minute of a
# core on a cold cache: they run in the slow tier (CI runs it too).
SLOW_BUILD = pytest.mark.slow


def first_bytes(plugin: Any) -> list[tuple[bytes, bytes]]:
    """Record the first byte of every request and answer of the plugin's pooled instance."""
    plugin.call("echo", "warm")  # an idle instance to watch
    inst = plugin._idle[-1]
    seen: list[tuple[bytes, bytes]] = []
    export = inst._call_export

    def recording(payload: bytes, limit: int) -> bytes | None:
        answer = export(payload, limit)
        seen.append((payload[:1], (answer or b"")[:1]))
        return answer
    inst._call_export = recording
    return seen


def test_the_javascript_sdk_asks_for_json_and_falls_back_per_call(components: Built,
                                                                   crt: Runtime) -> None:
    plugin = crt.load(components["conformance-javascript"], plugin_id="js-json")
    assert plugin.registration.codecs == ("json",)
    assert plugin.describe()["codecs"] == ["json"]
    seen = first_bytes(plugin)
    plain = {"text": "é😀", "n": [1, -2, 2**53, 1.5, None, True], "deep": [[[{}]]]}
    assert plugin.call("echo", plain).value == plain
    assert seen[-1] == (b"{", b"{")
    # Values JSON would not carry exactly: the request goes as MessagePack, and works.
    for value in ({"blob": b"\x00\xff", "n": 1}, 2**60, -(2**63), {"x": float("inf")}):
        assert plugin.call("echo", value).value == value
        assert seen[-1][0] != b"{" and seen[-1][1] != b"{", value
    nan = plugin.call("echo", [float("nan")]).value[0]
    assert nan != nan
    # An integral float comes back as the int JavaScript held (as with MessagePack).
    assert plugin.call("echo", [1.0, 2.5]).value == [1, 2.5]
    assert type(plugin.call("echo", [1.0]).value[0]) is int
    # The SDK's other answers (an error, a stop) are MessagePack, read as before.
    with pytest.raises(PluginError) as info:
        plugin.call("fail", "on purpose")
    assert info.value.code == "failed" and seen[-1] == (b"{", b"\x82")
    assert plugin.call("stop", [1]).stop is True
    assert plugin.call("repack", plain).value == plain


@SLOW_BUILD
def test_guests_that_do_not_ask_get_messagepack(components: Built, crt: Runtime) -> None:
    hostile = crt.load(components["json-hostile-js"], plugin_id="no-json",
                       settings={"json": False})
    assert hostile.registration.codecs == ()
    assert hostile.call("first", {"a": 1}).value == 0x82  # a MessagePack map of two
    # From a guest that did not ask, "{" is MessagePack's 123 with bytes after it.
    with pytest.raises(InvalidOutput, match="trailing bytes"):
        hostile.call("raw", b'{"ok":true,"value":1}')
    assert hostile.call("echo", "alive").value == "alive"
    asked = crt.load(components["json-hostile-js"], plugin_id="json")
    assert asked.call("first", {"a": 1}).value == 0x7B
    assert asked.call("first", b"bin").value == 0x82
    python = crt.load(components["conformance-python"], plugin_id="py-no-json")
    assert python.registration.codecs == ()
    seen = first_bytes(python)
    assert python.call("echo", {"a": [1, 2.5]}).value == {"a": [1, 2.5]}
    assert seen[-1] == (b"\x82", b"\x82")


def test_a_core_module_is_sent_messagepack_even_when_it_asks(runtime: Runtime) -> None:
    """The JSON payloads are the component world's: a core module's `codecs` is checked
    and shown, and it is sent MessagePack; a JSON answer from it is no answer."""
    # {"ok": true, "value": <uint8>}: the guest writes the request's first byte last.
    reg = {"hooks": [{"hook": "first"}, {"hook": "json"}], "codecs": ["json"]}
    asks_json = len(msgpack.packb({"hook": "json", "data": None}))
    body = f"""(i32.store8 (i32.const 4108) (i32.load8_u (local.get $p)))
      (if (result i64) (i32.eq (local.get $l) (i32.const {asks_json}))
        (then (i64.const {packed(DATA_AT, 21)}))
        (else (i64.const {packed(4096, 13)})))"""
    plugin = load_wat(runtime, guest_wat(body, registration=reg,
                                         response={"ok": True, "value": 200},
                                         data=b'{"ok":true,"value":1}'), plugin_id="core-asks")
    assert plugin.registration.codecs == ("json",)
    assert plugin.call("first", {"a": 1}).value == 0x82
    with pytest.raises(InvalidOutput):
        plugin.call("json", None)  # answered with JSON: MessagePack's 123, then more bytes


@pytest.mark.parametrize("codecs", ["json", ["json", 1], [f"c{i}" for i in range(17)]])
def test_a_malformed_codecs_entry_is_refused(runtime: Runtime, codecs: Any) -> None:
    with pytest.raises(InvalidOutput, match="'codecs' must be an array"):
        load_wat(runtime, guest_wat(registration={"hooks": [], "codecs": codecs}))


HOSTILE_ANSWERS = [
    (b'{"ok":true,"value":NaN}', "JSON number"),
    (b'{"ok":true,"value":-Infinity}', "JSON number"),
    (b'{"ok":true,"value":1e999}', "out of range"),
    (b'{"ok":true,"value":"\\udc00"}', "lone surrogate"),
    (b'{"ok":true,"value":"\xc3"}', "not UTF-8"),
    (b'{"ok":true,"value":1} {}', "Extra data"),
    (b'{"ok":true,"value":', "malformed JSON"),
    (b'{"ok":"yes"}', "bool 'ok'"),
    (b'{"ok":false,"error":"no"}', "error.code"),
    (b'{"ok":true,"stop":1}', "'stop' must be a bool"),
]


@SLOW_BUILD
@pytest.mark.parametrize(("answer", "why"), HOSTILE_ANSWERS)
def test_hostile_json_answers_are_invalid_output(components: Built, crt: Runtime,
                                                 answer: bytes, why: str) -> None:
    plugin = crt.load(components["json-hostile-js"], plugin_id="hostile-json")
    started = time.monotonic()
    with pytest.raises(InvalidOutput, match=why):
        plugin.call("raw", answer)
    assert time.monotonic() - started < BOUND_S
    assert plugin.call("echo", {"still": "here"}).value == {"still": "here"}


@SLOW_BUILD
def test_a_json_error_answer_is_the_guests_error(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["json-hostile-js"], plugin_id="json-error")
    with pytest.raises(PluginError) as info:
        plugin.call("raw", b'{"ok":false,"error":{"code":"nope","message":"no \\u001b[31m",'
                           b'"suggestion":"try","help_url":"javascript:x"}}')
    assert info.value.code == "nope" and "\x1b" not in info.value.message
    assert info.value.suggestion == "try" and info.value.help_url is None


@pytest.mark.parametrize(("hook", "n", "why"), [
    ("deep", 65, "nesting deeper than 64"),
    ("deep", 400_000, "nesting deeper than 64"),
    ("digits", 400, "out of range"),    # 1e400 as an integer: beyond a float64
    ("digits", 900_000, "out of range"),
    ("big", 2_000_000, "max_output_bytes"),
])
@SLOW_BUILD
def test_deep_and_huge_json_answers_fail_within_the_bound(components: Built, crt: Runtime,
                                                          hook: str, n: int,
                                                          why: str) -> None:
    plugin = crt.load(components["json-hostile-js"], plugin_id=f"huge-{hook}",
                      limits={"fuel_per_call": 10**9})
    started = time.monotonic()
    with pytest.raises(InvalidOutput, match=why):
        plugin.call(hook, n)
    assert time.monotonic() - started < BOUND_S
    assert plugin.call("echo", [1, "two"]).value == [1, "two"]


@SLOW_BUILD
def test_answers_at_the_limits_are_read(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["json-hostile-js"], plugin_id="at-limits",
                      limits={"fuel_per_call": 10**9})
    value: Any = plugin.call("deep", 63).value
    for _ in range(63):
        assert isinstance(value, list)
        value = value[0] if value else None
    assert plugin.call("digits", 300).value == float("9" * 300)
    assert plugin.call("big", 1_000_000).value == "x" * 1_000_000
