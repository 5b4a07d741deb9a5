"""The MessagePack codec: round trips, canonical vectors, and hostile bytes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext.errors import EncodeError
from wasmext.sandbox.codec import SCAN_LIMIT, DecodeError, check_depth, decode, encode
from wasmext.testing import vector_value as from_json

VECTORS = Path(__file__).resolve().parents[2] / "abi" / "vectors"


values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@given(values)
def test_round_trip(value: Any) -> None:
    assert decode(encode(value)) == value


@given(st.binary(max_size=200))
@settings(max_examples=500)
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(data, max_depth=8)


@given(st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=40))
def test_depth_limit_is_exact(depth: int, limit: int) -> None:
    doc = msgpack.packb(nested(depth))
    if depth <= limit:
        assert decode(doc, max_depth=limit) == nested(depth)
    else:
        with pytest.raises(DecodeError, match="nesting"):
            decode(doc, max_depth=limit)


def nested(depth: int) -> Any:
    value: Any = 0
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def test_canonical_vectors_encode_exactly() -> None:
    doc = json.loads((VECTORS / "msgpack.json").read_text())
    for v in doc["canonical"]:
        value = from_json(v["value"])
        assert encode(value).hex() == v["hex"], v["name"]
        assert decode(bytes.fromhex(v["hex"])) == value, v["name"]
    for v in doc["decode_only"]:
        assert decode(bytes.fromhex(v["hex"])) == from_json(v["value"]), v["name"]


def test_hostile_vectors_are_refused() -> None:
    for v in json.loads((VECTORS / "hostile.json").read_text())["hostile"]:
        with pytest.raises(DecodeError):
            decode(bytes.fromhex(v["hex"]))


def test_non_string_keys_refused_at_any_depth() -> None:
    with pytest.raises(DecodeError, match="not a string"):
        check_depth({"a": [{"b": {1: 2}}]}, 64)


def test_encode_error_names_the_problem() -> None:
    with pytest.raises(EncodeError, match="MessagePack"):
        encode({"x": object()})
    with pytest.raises(EncodeError):
        encode(2**70)


def test_host_refuses_to_send_documents_deeper_than_the_abi(runtime: object) -> None:
    from wasmext import Runtime
    from wasmext.testing import guest_wat, load_wat

    assert isinstance(runtime, Runtime)
    plugin = load_wat(runtime, guest_wat())
    with pytest.raises(EncodeError, match="nesting deeper than 64"):
        plugin.call("test", nested(64))  # 64 deep inside the request map: 65 in all
    assert plugin.call("test", nested(63)).value == "ok"


def _reference_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_reference_depth(v) for v in value), default=0)
    return 0


deep_values = st.recursive(
    st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(max_size=4),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=60,
)


@given(deep_values, st.integers(min_value=1, max_value=12), st.booleans())
@settings(max_examples=300)
def test_one_pass_walk_agrees_with_the_recursive_depth(value: Any, limit: int,
                                                       large: bool) -> None:
    # `large` pads the document past SCAN_LIMIT: decode then walks instead of scanning.
    doc = [value, "x" * (SCAN_LIMIT + 1)] if large else value
    too_deep = _reference_depth(doc) > limit
    with contextlib.nullcontext() if not too_deep else pytest.raises(DecodeError):
        check_depth(doc, limit)
    with contextlib.nullcontext() if not too_deep else pytest.raises(DecodeError):
        assert decode(encode(doc), max_depth=limit) == doc


def test_large_documents_still_refuse_depth_and_bytes_keys() -> None:
    pad = "x" * (SCAN_LIMIT * 4)
    with pytest.raises(DecodeError, match="nesting"):
        decode(msgpack.packb([pad, nested(70)]), max_depth=64)
    with pytest.raises(DecodeError, match="not a string"):
        decode(msgpack.packb({"pad": pad, "m": {b"k": 1}}, use_bin_type=True))
