"""The Python guest SDK outside the component: its MessagePack codec (it is
plain Python, so it runs here too), its WIT copy and its builder."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import ROOT, VECTORS
from wasmext.manifest import BuildSpec
from wasmext.testing import vector_value

SDK = ROOT / "guest-sdks" / "python"
# The codec alone: the package's other modules import the component's bindings.
_spec = importlib.util.spec_from_file_location("guest_msgpack",
                                               SDK / "wasmext_guest" / "msgpack.py")
assert _spec is not None and _spec.loader is not None
codec = importlib.util.module_from_spec(_spec)
sys.modules["guest_msgpack"] = codec
_spec.loader.exec_module(codec)
MsgpackError, pack, unpack = codec.MsgpackError, codec.pack, codec.unpack

DOC = json.loads((VECTORS / "msgpack.json").read_text())
HOSTILE = json.loads((VECTORS / "hostile.json").read_text())["hostile"]

scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | \
    st.floats(allow_nan=False) | st.text() | st.binary()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
    st.text(max_size=8), inner, max_size=5), max_leaves=30)


@pytest.mark.parametrize("vector", DOC["canonical"], ids=lambda v: v["name"])
def test_canonical_vectors(vector: dict[str, Any]) -> None:
    value = vector_value(vector["value"])
    assert pack(value).hex() == vector["hex"]
    assert unpack(bytes.fromhex(vector["hex"])) == value


@pytest.mark.parametrize("vector", DOC["decode_only"], ids=lambda v: v["name"])
def test_decode_only_vectors(vector: dict[str, Any]) -> None:
    assert unpack(bytes.fromhex(vector["hex"])) == vector_value(vector["value"])


@given(values)
def test_agrees_with_the_reference_codec(value: Any) -> None:
    packed = pack(value)
    assert packed == msgpack.packb(value, use_bin_type=True)
    assert unpack(packed) == value


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_refuse(data: bytes) -> None:
    try:
        value = unpack(data)
    except MsgpackError:
        return
    assert unpack(pack(value)) == value


@pytest.mark.parametrize("case", [c for c in HOSTILE if c["name"] != "non-string map key"],
                         ids=lambda c: c["name"])
def test_hostile_documents_are_refused(case: dict[str, str]) -> None:
    # (A non-string map key is well-formed MessagePack: only the host refuses it.)
    with pytest.raises(MsgpackError):
        unpack(bytes.fromhex(case["hex"]), max_depth=64)


def test_depth_limit_counts_containers() -> None:
    assert unpack(pack([[[1]]]), max_depth=3) == [[[1]]]
    with pytest.raises(MsgpackError, match="deeper than 2"):
        unpack(pack([[[1]]]), max_depth=2)


def test_the_sdk_ships_the_world_of_the_abi() -> None:
    assert (SDK / "wit" / "plugin.wit").read_text() == \
        (ROOT / "abi" / "wit" / "plugin.wit").read_text()


def test_hello_is_short() -> None:
    assert len((SDK / "examples" / "hello" / "app.py").read_text().splitlines()) <= 30


def test_the_builder_names_the_module_and_refuses_other_sources(tmp_path: Path) -> None:
    from wasmext_cli.build import BuildError
    from wasmext_cli.build.python import commands

    cmd = commands(BuildSpec("python", ("app.py",)), tmp_path, tmp_path / "out.wasm")[0]
    assert cmd[cmd.index("componentize") + 1:][-3:] == ["app", "-o", str(tmp_path / "out.wasm")]
    with pytest.raises(BuildError, match=r"must be a \.py file"):
        commands(BuildSpec("python", ("app.js",)), tmp_path, tmp_path / "out.wasm")


def test_a_call_finds_its_handler_by_hook_and_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's dispatch, run here with the component's bindings stubbed: one handler
    per hook name, a tag pattern choosing among several, an unmatched tag unhandled."""
    guest = _stubbed_guest(monkeypatch)

    class Tags(guest.Plugin):  # type: ignore[misc, name-defined]
        @guest.hook("echo")
        def echo(self, data: Any) -> Any:
            return data

        @guest.hook("output_extension", pattern="json")
        def as_json(self, data: Any) -> Any:
            return "json"

        @guest.hook("output_extension", pattern="stat*")
        def as_stats(self, data: Any) -> Any:
            return "stats"

    world = guest.export(Tags())()

    def call(hook: str, data: Any) -> Any:
        return msgpack.unpackb(world.call(msgpack.packb({"hook": hook, "data": data})))

    assert call("echo", {"text": "hi"}) == {"ok": True, "value": {"text": "hi"}}
    assert call("output_extension", {"tag": "json"})["value"] == "json"
    assert call("output_extension", {"tag": "stats"})["value"] == "stats"
    assert call("output_extension", {"tag": "other"})["error"]["code"] == "unhandled"
    assert call("missing", None)["error"]["code"] == "unhandled"


def _stubbed_guest(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The SDK package imported with the component's bindings stubbed."""
    import types

    host = types.ModuleType("wit_world.imports.host")
    host.host_call = lambda request: b""  # type: ignore[attr-defined]
    host.log = lambda level, message: None  # type: ignore[attr-defined]
    for name, module in (("wit_world", types.ModuleType("wit_world")),
                         ("wit_world.imports", types.ModuleType("wit_world.imports")),
                         ("wit_world.imports.host", host)):
        monkeypatch.setitem(sys.modules, name, module)
    for name in [m for m in sys.modules if m == "wasmext_guest" or m.startswith("wasmext_guest.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(SDK))
    return importlib.import_module("wasmext_guest")


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text()
    | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


def test_the_lean_call_path_answers_what_the_request_map_path_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`call` reads the request's fields in place and writes the value behind the
    answer's fixed head: its bytes are those of pack(handle(unpack(request))), for any
    data, extra or repeated keys, a meta, each kind of answer."""
    guest = _stubbed_guest(monkeypatch)

    class Both(guest.Plugin):  # type: ignore[misc, name-defined]
        @guest.hook("echo")
        def echo(self, value: Any) -> Any:
            return value

        @guest.hook("unchanged")
        def unchanged(self, value: Any) -> Any:
            return guest.UNCHANGED

        @guest.hook("stop")
        def stop(self, value: Any) -> Any:
            return guest.Stop(value)

        @guest.hook("fail")
        def fail(self, value: Any) -> Any:
            raise guest.Fail("invalid", "no")

    plugin = Both()
    world = guest.export(plugin)()

    @given(hook=st.sampled_from(["echo", "unchanged", "stop", "fail", "missing"]),
           data=_values,
           extra=st.dictionaries(st.sampled_from(["meta", "trace", "hook"]), _values,
                                 max_size=2))
    def check(hook: str, data: Any, extra: dict[str, Any]) -> None:
        pairs = [("hook", hook), ("data", data), *extra.items()]
        request = bytes([0x80 | len(pairs)]) + b"".join(
            msgpack.packb(k) + msgpack.packb(v, use_bin_type=True) for k, v in pairs)
        expected = plugin.handle(dict(pairs))
        answer = world.call(request)
        assert answer == (b"" if expected is None else guest.msgpack.pack(expected))

    check()


def test_the_lean_call_path_refuses_what_unpack_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken request gets the same `invalid` answer on the lean path as before: a
    truncated map, trailing bytes, a document that is not a map, too deep a value."""
    guest = _stubbed_guest(monkeypatch)

    class Echo(guest.Plugin):  # type: ignore[misc, name-defined]
        @guest.hook("echo")
        def echo(self, value: Any) -> Any:
            return value

    world = guest.export(Echo())()
    good = msgpack.packb({"hook": "echo", "data": [1, 2]})
    deep: Any = 0
    for _ in range(70):
        deep = [deep]
    for broken in (good[:-1], good + b"\x00", msgpack.packb([1, 2]), b"",
                   msgpack.packb({"hook": "echo", "data": deep}), b"\x81\x91\x01\x01"):
        answer = msgpack.unpackb(world.call(broken))
        assert answer["ok"] is False and answer["error"]["code"] == "invalid", broken
    assert msgpack.unpackb(world.call(good)) == {"ok": True, "value": [1, 2]}


def test_a_plugin_overriding_handle_gets_the_request_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subclass that overrides `handle` sees every call's whole request map."""
    guest = _stubbed_guest(monkeypatch)
    seen: list[Any] = []

    class Own(guest.Plugin):  # type: ignore[misc, name-defined]
        def handle(self, request: dict[str, Any]) -> dict[str, Any] | None:
            seen.append(request)
            return {"ok": True, "value": "mine"}

    world = guest.export(Own())()
    answer = world.call(msgpack.packb({"hook": "x", "data": 1, "trace": "t"}))
    assert msgpack.unpackb(answer) == {"ok": True, "value": "mine"}
    assert seen == [{"hook": "x", "data": 1, "trace": "t"}]


def _boundary_values() -> list[Any]:
    ints = [0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1,
            -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]
    floats = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), 1e308, 5e-324]
    strs = ["", "a" * 31, "a" * 32, "a" * 255, "a" * 256, "a" * 65535, "a" * 65536,
            "é" * 15 + "a", "é" * 16, "é" * 127 + "a", "é" * 128, "😀" * 64]
    bins = [b"", b"\x00" * 255, b"\xff" * 256, b"x" * 65535, b"y" * 65536]
    containers = [list(range(n)) for n in (15, 16, 65535, 65536)] + \
        [{f"k{i}": i for i in range(n)} for n in (15, 16, 65535, 65536)] + \
        [{1: "int key", b"b": "bin key", None: 0}, {"": [None, True, False]}, ("a", ("b",))]
    return ints + floats + strs + bins + containers


@pytest.mark.parametrize("value", _boundary_values(),
                         ids=lambda v: f"{type(v).__name__}:{str(v)[:24]}")
def test_every_type_boundary_agrees_with_the_reference_codec(value: Any) -> None:
    """Each width's first and last value, both directions, and inside a call request."""
    packed = pack(value)
    assert packed == msgpack.packb(value, use_bin_type=True)
    expected = msgpack.unpackb(packed, strict_map_key=False, raw=False)
    assert unpack(packed) == expected
    assert codec.pack_answer(value) == msgpack.packb({"ok": True, "value": value},
                                                     use_bin_type=True)
    request = msgpack.packb({"hook": "h", "data": value, "meta": {"m": value}},
                            use_bin_type=True)
    assert codec.unpack_call(request) == ("h", expected, {"m": expected})


def test_ints_past_64_bits_and_lone_surrogates_have_no_encoding() -> None:
    for value in (2**64, -(2**63) - 1, "\ud800", {"\udfff": 1}, ["x", "\ud800"]):
        with pytest.raises(MsgpackError):
            pack(value)


def test_nesting_is_refused_past_the_depth_limit_on_both_sides() -> None:
    """pack allows MAX_DEPTH containers (pack_answer one fewer inside its map); unpack
    and unpack_call refuse one past max_depth with MsgpackError."""
    def nested(levels: int) -> Any:
        value: Any = 0
        for i in range(levels):
            value = [value] if i % 2 else {"k": value}
        return value

    limit = codec.MAX_DEPTH
    assert unpack(pack(nested(limit))) == nested(limit)
    assert unpack(codec.pack_answer(nested(limit - 1)))["value"] == nested(limit - 1)
    for too_deep in (lambda: pack(nested(limit + 1)),
                     lambda: codec.pack_answer(nested(limit)),
                     lambda: unpack(msgpack.packb(nested(limit + 1))),
                     lambda: unpack(msgpack.packb(nested(5)), max_depth=4),
                     lambda: codec.unpack_call(msgpack.packb({"hook": "h",
                                                              "data": nested(limit)}))):
        with pytest.raises(MsgpackError, match="deeper than"):
            too_deep()
    assert codec.unpack_call(msgpack.packb({"hook": "h", "data": nested(limit - 1)})) == \
        ("h", nested(limit - 1), None)


@settings(max_examples=40)  # each example reads every cut of two documents
@given(values)
def test_every_truncation_and_extension_is_refused(value: Any) -> None:
    """A cut document (at every length) or one with a byte after it raises MsgpackError,
    never IndexError or another error of the reader, from unpack and unpack_call."""
    packed = pack(value)
    request = msgpack.packb({"hook": "h", "data": value}, use_bin_type=True)
    for doc, read in ((packed, unpack), (request, codec.unpack_call)):
        for cut in range(len(doc)):
            with pytest.raises(MsgpackError):
                read(doc[:cut])
        with pytest.raises(MsgpackError, match="after the value"):
            read(doc + b"\xc0")


@given(st.binary(max_size=64))
def test_arbitrary_bytes_read_as_a_call_or_refuse(data: bytes) -> None:
    """unpack_call accepts exactly what unpack accepts, with the same fields."""
    try:
        value = unpack(data)
    except MsgpackError:
        with pytest.raises(MsgpackError):
            codec.unpack_call(data)
        return
    fields = codec.unpack_call(data)
    if not isinstance(value, dict):
        assert fields is None
    else:
        assert fields == (value.get("hook"), value.get("data"), value.get("meta"))


def test_cached_map_keys_write_what_fresh_ones_write() -> None:
    """Map keys are kept encoded between calls: past the cache's size, for long keys,
    for str subclasses equal to a kept key, the bytes stay the reference codec's."""
    import enum

    class Color(str, enum.Enum):
        RED = "red"

    many = {f"key-{i}": i for i in range(codec._KEY_CACHE + 50)}
    long = {"k" * 40: 1, "é" * 20: 2, "e" * 300: 3}
    for doc in (many, many, long, long, {"red": 1}, {Color.RED: 1}, {"red": Color.RED}):
        assert pack(doc) == msgpack.packb(doc, use_bin_type=True)
    assert len(codec._keys) <= codec._KEY_CACHE


def test_a_repeated_hook_reads_like_a_new_one() -> None:
    """unpack_call keeps the last request's head (hook name and keys): a request with
    the same head but other data, a later repeated key, or another hook of the same
    length reads as unpack reads it."""
    docs = [{"hook": "echo", "data": 1}, {"hook": "echo", "data": {"a": "b"}},
            {"hook": "echo", "data": [1], "hook": "late"},  # noqa: F601 (last wins)
            {"hook": "ohce", "data": 2}, {"hook": "echo", "data": None, "meta": {"s": 1}},
            {"hook": "echo", "meta": {}, "data": "x"}, {"hook": "echo"}, {"data": 3}]
    for doc in docs * 2:
        packed = msgpack.packb(doc)
        value = unpack(packed)
        assert codec.unpack_call(packed) == (value.get("hook"), value.get("data"),
                                             value.get("meta"))


def test_self_call_holds_the_running_call_and_nothing_between_calls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`self.call` (made only when a handler asks) names the running call's hook, data
    and meta, for a hook with one handler and for one chosen by a pattern; a meta that
    is not a map reads as {}; between calls it is None, and a later call that does
    not ask sees none of an earlier call's."""
    guest = _stubbed_guest(monkeypatch)
    seen: list[Any] = []

    class Asks(guest.Plugin):  # type: ignore[misc, name-defined]
        @guest.hook("echo")
        def echo(self, data: Any) -> Any:
            call = self.call
            seen.append((call.hook, call.data, call.meta, self.call is call))
            return data

        @guest.hook("quiet")
        def quiet(self, data: Any) -> Any:
            return data

        @guest.hook("output_extension", pattern="json")
        def as_json(self, data: Any) -> Any:
            seen.append((self.call.hook, self.call.data, self.call.meta))
            return "json"

    plugin = Asks()
    world = guest.export(plugin)()

    def call(request: dict[str, Any]) -> Any:
        return msgpack.unpackb(world.call(msgpack.packb(request)))

    assert plugin.call is None
    assert call({"hook": "echo", "data": [1], "meta": {"session": "s"}})["value"] == [1]
    assert seen.pop() == ("echo", [1], {"session": "s"}, True)
    assert plugin.call is None
    assert call({"hook": "echo", "data": 2, "meta": "not a map"})["value"] == 2
    assert seen.pop() == ("echo", 2, {}, True)
    assert call({"hook": "quiet", "data": 3})["value"] == 3 and plugin.call is None
    assert call({"hook": "output_extension", "data": {"tag": "json"}})["value"] == "json"
    assert seen.pop() == ("output_extension", {"tag": "json"}, {})
    assert plugin._made is None  # nothing of the last call is held after it
    # A hook name that is not a str (a host's broken request) is unhandled, not a crash.
    answer = call({"hook": [1], "data": None})
    assert answer["ok"] is False and answer["error"]["code"] == "unhandled"
