"""The component world's JSON payloads (sandbox.jsonwire): which requests go as JSON,
that they come back exactly, and the checks a guest's JSON answer meets first."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext.errors import DecodeError
from wasmext.sandbox.codec import decode
from wasmext.sandbox.jsonwire import SAFE_INT, _depth_outside_strings, decode_json, json_request

DEPTH = 64
CAP = 1 << 20

scalars = (st.none() | st.booleans() | st.text(max_size=20)
           | st.integers(min_value=-(2**64), max_value=2**64 - 1)
           | st.floats(allow_nan=True, allow_infinity=True) | st.binary(max_size=8))
keys = st.text(max_size=8) | st.integers(-3, 3) | st.binary(max_size=3)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=20)
plain_values = st.recursive(
    st.none() | st.booleans() | st.text(max_size=20)
    | st.integers(min_value=-SAFE_INT, max_value=SAFE_INT)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4), max_leaves=20)


def exact_in_json(value: Any, depth: int = 0) -> bool:
    """The rule, written plainly: what JSON carries exactly, as the SPEC states it."""
    if isinstance(value, (dict, list)):
        if depth + 1 > DEPTH:
            return False
        if isinstance(value, dict):
            return all(isinstance(k, str) for k in value) and \
                all(exact_in_json(v, depth + 1) for v in value.values())
        return all(exact_in_json(v, depth + 1) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return -SAFE_INT <= value <= SAFE_INT
    if isinstance(value, float):
        return math.isfinite(value)
    return False


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    return bool(a == b)


@settings(max_examples=400, deadline=None)
@given(values)
def test_a_request_goes_as_json_exactly_when_json_carries_it(data: Any) -> None:
    req = {"hook": "h", "data": data}
    text = json_request(req, DEPTH, CAP)
    assert (text is not None) == exact_in_json(req)
    if text is not None:
        assert text[:1] == b"{"
        # What the guest reads is what MessagePack would have carried, types included.
        assert same(decode_json(text, DEPTH), msgpack.unpackb(msgpack.packb(req)))


@settings(max_examples=300, deadline=None)
@given(plain_values)
def test_plain_values_round_trip_through_the_answer_reader(value: Any) -> None:
    answer = json.dumps({"ok": True, "value": value}, ensure_ascii=False).encode()
    assert same(decode_json(answer, DEPTH), {"ok": True, "value": value})


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.text(alphabet='[]{}"\\ab', max_size=6),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(alphabet='[]{}"\\', max_size=3), inner,
                                      max_size=3), max_leaves=12))
def test_the_depth_scan_ignores_brackets_in_strings(value: Any) -> None:
    def depth(v: Any) -> int:
        if isinstance(v, dict):
            return 1 + max(map(depth, v.values()), default=0)
        if isinstance(v, list):
            return 1 + max(map(depth, v), default=0)
        return 0
    assert _depth_outside_strings(json.dumps(value).encode()) == depth(value)


def test_requests_json_cannot_carry_go_as_messagepack() -> None:
    for data in (b"bin", {1: "int key"}, 2**53 + 1, -(2**53) - 1, float("nan"), float("inf"),
                 {"deep": [[[]]]}, "\ud800", {"set": {1}}):
        req = {"hook": "h", "data": data}
        if data == {"deep": [[[]]]}:
            assert json_request(req, 3, CAP) is None  # 4 containers over a limit of 3
            continue
        assert json_request(req, DEPTH, CAP) is None, data
    assert json_request({"hook": "h", "data": "x" * 100}, DEPTH, 50) is None  # over the cap
    assert json_request({"hook": "h", "data": [2**53, -(2**53), 1.0]}, DEPTH, CAP) == \
        b'{"hook":"h","data":[9007199254740992,-9007199254740992,1.0]}'


def test_numbers_read_as_the_guest_engine_held_them() -> None:
    value = decode_json(b'{"ok":true,"value":[1,1.0,-0,9007199254740993,1e21,12.5,'
                        b'100000000000000000000]}', DEPTH)["value"]
    assert same(value, [1, 1.0, 0, 9007199254740992.0, 1e21, 12.5, 1e20])


@pytest.mark.parametrize("text", [
    b'{"ok":true,"value":NaN}', b'{"ok":true,"value":Infinity}',
    b'{"ok":true,"value":-Infinity}', b'{"ok":true,"value":1e400}',
    b'{"ok":true,"value":-1e400}', b'{"ok":true,"value":' + b"9" * 5000 + b"}",
    b'{"ok":true,"value":"\\ud800"}', b'{"ok":true,"value":{"\\udfff":1}}',
    b'{"ok":true,"value":"\xff"}', b'{"ok":true,"value":"\xed\xa0\x80"}',
    b'{"ok":true,"value":1} x', b'{"ok":true,"value":1}{}', b'{"ok":true,',
    b'{"ok":true,"value":"a\x00b"}', b'{\x00"\x00o\x00k\x00"\x00:\x001\x00}\x00',
    b"[1]", b"", b' {"ok":true}', b'{"ok":true,"value":01}', b"{'ok':true}",
])
def test_hostile_json_answers_are_refused(text: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_json(text, DEPTH)


def test_nesting_is_measured_before_the_parser_recurses() -> None:
    for n in (65, 1000, 500_000):
        doc = b'{"ok":true,"value":' + b"[" * (n - 1) + b"]" * (n - 1) + b"}"
        started = time.monotonic()
        with pytest.raises(DecodeError, match="nesting deeper than 64"):
            decode_json(doc, DEPTH)
        assert time.monotonic() - started < 2.0
    ok = b'{"ok":true,"value":' + b"[" * 63 + b"]" * 63 + b"}"
    assert decode_json(ok, DEPTH)["ok"] is True
    # Brackets inside strings are text: a thousand of them are no nesting at all.
    text = b'{"ok":true,"value":"' + b"[{" * 1000 + b'\\"\\\\[[["}'
    assert decode_json(text, DEPTH)["value"] == "[{" * 1000 + '"\\[[['
    # Unclosed, and hiding openers behind escaped quotes: still bounded, still refused.
    sneaky = b'{"ok":true,"value":"\\"' + b"[" * 100 + b"]" * 100 + b'"' + b"[" * 70
    with pytest.raises(DecodeError):
        decode_json(sneaky, DEPTH)


def test_escaped_surrogate_pairs_and_controls_are_text() -> None:
    doc = b'{"ok":true,"value":"\\ud83d\\ude00 \\u0007 \\u00e9"}'
    assert decode_json(doc, DEPTH)["value"] == "\U0001F600 \x07 \u00e9"


def test_duplicate_keys_read_as_messagepack_reads_them() -> None:
    """A repeated key: the last one counts, in both codecs (the same verdict on the same
    answer, whichever codec the guest wrote)."""
    doc = decode_json(b'{"ok":false,"ok":true,"value":1,"value":2}', DEPTH)
    packed = b"\x84\xa2ok\xc2\xa2ok\xc3\xa5value\x01\xa5value\x02"
    assert doc == decode(packed, DEPTH) == {"ok": True, "value": 2}
