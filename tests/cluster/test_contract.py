"""The CP-Ext / CP2 codec: round trips in both encodings, unknown keys refused, bounds."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext.cluster.contract import (
    JSON,
    MAX_BYTES,
    MSGPACK,
    ContractError,
    ExtMessage,
    ExtRef,
    ExtRequest,
    ExtResponse,
    ProviderRequest,
    ProviderResponse,
    Verdict,
    decode,
    encode,
    encoding_of,
)

text = st.text(max_size=40)
leaf = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | text
json_value = st.recursive(leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(text, inner, max_size=4), max_leaves=12)
maps = st.dictionaries(text, json_value, max_size=4)
messages = st.builds(ExtMessage, message_id=text, message_type=text, payload=text,
                     metadata=maps)
requests = st.builds(ExtRequest, trace_id=text, tenant_id=text,
                     extensions=st.builds(ExtRef, id=text, config=maps),
                     message=messages, context=maps)
responses = st.builds(ExtResponse, message=messages, context=maps)
verdicts = st.builds(Verdict, status=st.sampled_from(["ok", "reject"]),
                     reason=st.none() | text, details=maps)
provider_requests = st.builds(ProviderRequest, trace_id=text, tenant_id=text, provider_id=text,
                              prompt=text, parameters=maps, context=maps)
provider_responses = st.builds(ProviderResponse, provider_id=text, output=text,
                               usage=st.dictionaries(text, st.integers(0, 2**31)),
                               metadata=maps)
any_message = requests | responses | verdicts | provider_requests | provider_responses
encodings = st.sampled_from([JSON, MSGPACK])


@given(any_message, encodings)
def test_every_message_round_trips(message: Any, encoding: str) -> None:
    assert decode(encode(message, encoding), type(message), encoding) == message


@given(any_message)
def test_json_is_plain_json_with_the_reference_keys(message: Any) -> None:
    doc = json.loads(encode(message, JSON))
    assert set(doc) <= set(type(message).__struct_fields__)
    assert decode(json.dumps(doc).encode(), type(message)) == message


def _paths(doc: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths of the contract's own objects (free maps like metadata are not)."""
    free = {"metadata", "config", "context", "details", "parameters", "usage"}
    found = [path]
    for key, value in doc.items():
        if isinstance(value, dict) and key not in free:
            found += _paths(value, (*path, key))
    return found


@given(any_message, encodings, st.data())
def test_an_unknown_key_anywhere_is_refused_and_named(message: Any, encoding: str,
                                                      data: st.DataObject) -> None:
    doc = json.loads(encode(message, JSON))
    path = data.draw(st.sampled_from(_paths(doc)))
    target = doc
    for key in path:
        target = target[key]
    target["surprise"] = 1
    raw = msgpack.packb(doc) if encoding == MSGPACK else json.dumps(doc).encode()
    with pytest.raises(ContractError, match="unknown field `surprise`"):
        decode(raw, type(message), encoding, peer="ext x")


@settings(max_examples=300)
@given(st.binary(max_size=200), encodings)
def test_arbitrary_bytes_fail_only_with_contract_error(data: bytes, encoding: str) -> None:
    for kind in (ExtRequest, ExtResponse, Verdict, ProviderRequest, ProviderResponse):
        with contextlib.suppress(ContractError):
            decode(data, kind, encoding)


def test_required_fields_and_types_are_checked() -> None:
    with pytest.raises(ContractError, match="context"):
        decode(b'{"message": {"message_id": "m", "message_type": "chat", "payload": "p"}}',
               ExtResponse)
    with pytest.raises(ContractError, match="status"):
        decode(b'{"status": "maybe"}', Verdict)
    with pytest.raises(ContractError, match=r"\$\.usage"):
        decode(b'{"provider_id": "p", "output": "o", "usage": {"t": "many"}}',
               ProviderResponse)


def test_the_reference_examples_decode() -> None:
    request = decode(json.dumps({
        "trace_id": "uuid", "tenant_id": "tenant-123",
        "extensions": {"id": "normalize_text", "config": {"lowercase": True}},
        "message": {"message_id": "m-1", "message_type": "chat", "payload": "Original text",
                    "metadata": {"channel": "telegram"}},
        "context": {"lang": "en"}}).encode(), ExtRequest)
    assert request.extensions.id == "normalize_text"
    assert encode(Verdict("ok")) == b'{"status":"ok"}'
    verdict = decode(b'{"status": "reject", "reason": "pii_detected", "details": '
                     b'{"field": "payload", "pattern": "credit_card"}}', Verdict)
    assert verdict.details["pattern"] == "credit_card"


def test_size_and_depth_are_bounded() -> None:
    started = time.monotonic()
    with pytest.raises(ContractError, match="over"):
        decode(b" " * (MAX_BYTES + 1), Verdict)
    deep = b'{"status": "ok", "details": {"d": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}"
    with pytest.raises(ContractError, match=r"too deep|over"):
        decode(deep[:MAX_BYTES], Verdict)
    deep = b'{"status": "ok", "details": {"d": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    with pytest.raises(ContractError, match="too deep"):
        decode(deep, Verdict)
    assert time.monotonic() - started < 5
    assert decode(b'{"status": "ok"}', Verdict) == Verdict("ok")  # still decoding fine


def test_the_encoding_comes_from_the_content_type_header() -> None:
    assert encoding_of(None) == JSON
    assert encoding_of({"Content-Type": "application/msgpack"}) == MSGPACK
    assert encoding_of({"Content-Type": "text/plain"}) == JSON
