"""Regenerate abi/vectors/*.json (run by hand when the ABI gains a vector).

The vectors are data: SDKs in every language read them, so they are committed
and never generated during a build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgpack

OUT = Path(__file__).resolve().parent / "vectors"

# (name, value). bin values are written as {"$bin": hex}; floats as {"$f64": repr}.
VALUES: list[tuple[str, Any]] = [
    ("nil", None), ("true", True), ("false", False),
    ("posfixint 0", 0), ("posfixint 127", 127), ("negfixint -1", -1), ("negfixint -32", -32),
    ("uint8", 200), ("uint16", 60000), ("uint32", 4000000000), ("uint64", 2**63 + 5),
    ("int8", -100), ("int16", -30000), ("int32", -2000000000), ("int64", -(2**62)),
    ("float64", 1.5), ("float64 negative", -0.25),
    ("fixstr empty", ""), ("fixstr", "hello"), ("str8", "x" * 40), ("str16", "y" * 300),
    ("str32", "z" * 70000), ("utf8", "héllo wörld ✓ 😀"),
    ("bin8", b"\x00\x01\xff"), ("bin16", bytes(range(256)) * 2),
    ("fixarray empty", []), ("fixarray", [1, "a", None]), ("array16", list(range(20))),
    ("fixmap empty", {}), ("fixmap", {"a": 1, "b": [True, False]}),
    ("map16", {f"k{i}": i for i in range(17)}),
    ("nested", {"hook": "on_plain_text", "data": {"text": "hi", "tags": ["x", {"y": -7}]}}),
]


# What the host makes of a guest's call response (request data is always "in")
# and of a registration map. "verdict" is: value (with changed/stop), error
# (a PluginError with that code) or invalid (InvalidOutput).
ENVELOPES = {
    "call_responses": [
        {"response": {"ok": True, "value": "out"}, "verdict": "value", "value": "out",
         "changed": True, "stop": False},
        {"response": {"ok": True}, "verdict": "value", "value": "in", "changed": False,
         "stop": False},
        {"response": {"ok": True, "value": None}, "verdict": "value", "value": None,
         "changed": True, "stop": False},
        {"response": {"ok": True, "value": 1, "stop": True, "meta": {"why": "done"}},
         "verdict": "value", "value": 1, "changed": True, "stop": True},
        {"response": {"ok": True, "future_field": [1]}, "verdict": "value", "value": "in",
         "changed": False, "stop": False},
        {"response": {"ok": False, "error": {"code": "failed", "message": "no"}},
         "verdict": "error", "code": "failed"},
        {"response": {"ok": False, "error": {"code": "unhandled"}}, "verdict": "error",
         "code": "unhandled"},
        {"response": {"ok": False}, "verdict": "invalid"},
        {"response": {"ok": False, "error": {"message": "no code"}}, "verdict": "invalid"},
        {"response": {"ok": 1}, "verdict": "invalid"},
        {"response": {"value": 1}, "verdict": "invalid"},
        {"response": [True], "verdict": "invalid"},
        {"response": {"ok": True, "stop": 1}, "verdict": "invalid"},
        {"response": {"ok": True, "meta": "x"}, "verdict": "invalid"},
    ],
    "registrations": [
        {"map": {"hooks": []}, "verdict": "ok"},
        {"map": {"hooks": [{"hook": "on_plain_text"}], "abi_minor": 0, "name": "n",
                 "version": "1.0.0", "tools": []}, "verdict": "ok"},
        {"map": {"hooks": [{"hook": "on_tag", "priority": 100, "pattern": "think*"}]},
         "verdict": "ok"},
        {"map": {"hooks": [{"hook": "x"}], "abi_minor": 7}, "verdict": "ok"},
        {"map": {}, "verdict": "invalid"},
        {"map": {"hooks": {"hook": "x"}}, "verdict": "invalid"},
        {"map": {"hooks": [{"hook": ""}]}, "verdict": "invalid"},
        {"map": {"hooks": [{"hook": "x", "priority": 101}]}, "verdict": "invalid"},
        {"map": {"hooks": [{"hook": "x", "priority": "high"}]}, "verdict": "invalid"},
        {"map": {"hooks": [{"hook": "x", "pattern": 5}]}, "verdict": "invalid"},
        {"map": {"hooks": [], "abi_minor": -1}, "verdict": "invalid"},
        {"map": {"hooks": [], "name": 5}, "verdict": "invalid"},
        {"map": ["hooks"], "verdict": "invalid"},
        # The answer region (minor 3, SPEC 1.4.1): checked only from a minor-3 guest.
        {"map": {"hooks": [], "abi_minor": 3, "answer_region": {"ptr": 16384, "size": 1024}},
         "verdict": "ok"},
        {"map": {"hooks": [], "abi_minor": 3,
                 "answer_region": {"ptr": 4294967288, "size": 8}}, "verdict": "ok"},
        {"map": {"hooks": [], "abi_minor": 2, "answer_region": [0, 0]}, "verdict": "ok"},
        {"map": {"hooks": [], "abi_minor": 3, "answer_region": {"ptr": 0, "size": 16}},
         "verdict": "invalid"},
        {"map": {"hooks": [], "abi_minor": 3, "answer_region": {"ptr": 16384, "size": 0}},
         "verdict": "invalid"},
        {"map": {"hooks": [], "abi_minor": 3,
                 "answer_region": {"ptr": 4294967288, "size": 9}}, "verdict": "invalid"},
        {"map": {"hooks": [], "abi_minor": 3, "answer_region": [16384, 1024]},
         "verdict": "invalid"},
        {"map": {"hooks": [], "abi_minor": 3,
                 "answer_region": {"ptr": 16384, "size": 1024, "more": 1}},
         "verdict": "invalid"},
    ],
}


# Host calls of minor 1 with the plugin's grants and the answer every host gives,
# when its model is "vector-model" answering "vector answer" with usage 3/2, its
# price table empty, no agents registered. Sent by a guest that negotiated minor 1.
_HI = [{"role": "user", "content": "hi"}]
HOST_CALLS = [
    {"request": {"op": "http.fetch", "url": "http://example.org/"}, "grants": [],
     "code": "denied"},
    {"request": {"op": "http.fetch", "url": "http://example.org/"}, "grants": ["http"],
     "code": "denied"},
    {"request": {"op": "http.fetch", "url": "http://169.254.169.254/latest/meta-data/"},
     "grants": ["http", "http:*"], "code": "denied"},
    {"request": {"op": "http.fetch", "url": "http://127.0.0.1:9/"},
     "grants": ["http", "http:127.0.0.*"], "code": "denied"},
    {"request": {"op": "http.fetch", "url": "ftp://example.org/"},
     "grants": ["http", "http:*"], "code": "invalid"},
    {"request": {"op": "http.fetch", "url": "http://example.org/", "method": "BREW"},
     "grants": ["http", "http:*"], "code": "invalid"},
    {"request": {"op": "http.fetch"}, "grants": ["http", "http:*"], "code": "invalid"},
    {"request": {"op": "llm.complete", "messages": _HI}, "grants": [], "code": "denied"},
    {"request": {"op": "llm.complete", "messages": []}, "grants": ["llm"], "code": "invalid"},
    {"request": {"op": "llm.complete", "messages": _HI, "model": "other-model"},
     "grants": ["llm"], "code": "denied"},
    {"request": {"op": "llm.complete", "messages": _HI, "max_tokens": 10_000_000},
     "grants": ["llm"], "code": "limit"},
    {"request": {"op": "llm.complete", "messages": _HI, "max_tokens": 10}, "grants": ["llm"],
     "value": {"text": "vector answer", "finish_reason": "stop", "model": "vector-model",
               "usage": {"input": 3, "output": 2}, "cost": 0.0}},
    {"request": {"op": "agents.request", "agent": "a", "input": "x"}, "grants": [],
     "code": "denied"},
    {"request": {"op": "agents.send", "agent": "a", "input": "x"}, "grants": ["agents"],
     "code": "denied"},
]


# Host calls of minor 2 from a guest whose registration map declares METRICS_2 (and
# negotiated minor 2); every host answers them the same way.
METRICS_2 = [{"name": "hits", "kind": "counter", "labels": ["tier"]},
             {"name": "depth", "kind": "gauge"},
             {"name": "latency_ms", "kind": "histogram", "buckets": [1, 10, 100]}]
HOST_CALLS_2 = [
    {"request": {"op": "metric.add", "name": "hits", "labels": {"tier": "l1"}}, "value": None},
    {"request": {"op": "metric.add", "name": "hits", "value": 2.5, "labels": {"tier": "l1"}},
     "value": None},
    {"request": {"op": "metric.add", "name": "hits", "value": -1, "labels": {"tier": "l1"}},
     "code": "invalid"},
    {"request": {"op": "metric.add", "name": "hits"}, "code": "invalid"},
    {"request": {"op": "metric.add", "name": "hits", "labels": {"tier": 1}}, "code": "invalid"},
    {"request": {"op": "metric.add", "name": "depth", "value": -3}, "value": None},
    {"request": {"op": "metric.set", "name": "depth", "value": 7}, "value": None},
    {"request": {"op": "metric.set", "name": "depth"}, "code": "invalid"},
    {"request": {"op": "metric.set", "name": "hits", "value": 1, "labels": {"tier": "l1"}},
     "code": "invalid"},
    {"request": {"op": "metric.observe", "name": "latency_ms", "value": 12}, "value": None},
    {"request": {"op": "metric.observe", "name": "depth", "value": 12}, "code": "invalid"},
    {"request": {"op": "metric.add", "name": "undeclared"}, "code": "not_found"},
]


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"$bin": v.hex()}
    if isinstance(v, float):
        return {"$f64": repr(v)}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def main() -> None:
    OUT.mkdir(exist_ok=True)
    vectors = [{"name": n, "value": _jsonable(v), "hex": msgpack.packb(v, use_bin_type=True).hex()}
               for n, v in VALUES]
    decode_only = [
        {"name": "float32 1.5", "hex": "ca3fc00000", "value": {"$f64": "1.5"}},
        {"name": "non-minimal uint8 for 1", "hex": "cc01", "value": 1},
        {"name": "non-minimal str8 'a'", "hex": "d90161", "value": "a"},
    ]
    (OUT / "msgpack.json").write_text(json.dumps(
        {"canonical": vectors, "decode_only": decode_only}, indent=1) + "\n")
    hostile = [
        {"name": "truncated map", "hex": "82a16101"},
        {"name": "str32 declares 4 GiB", "hex": "dbffffffff41"},
        {"name": "array32 declares 4 billion items", "hex": "ddffffffff"},
        {"name": "map32 declares 4 billion pairs", "hex": "dfffffffff"},
        {"name": "deep nesting 100 arrays", "hex": "91" * 100 + "c0"},
        {"name": "ext type", "hex": "d40101"},
        {"name": "reserved byte 0xc1", "hex": "c1"},
        {"name": "trailing bytes", "hex": "80c0"},
        {"name": "invalid utf-8 in str", "hex": "a2ffff"},
        {"name": "non-string map key", "hex": "81" + "01" + "02"},
        {"name": "empty", "hex": ""},
    ]
    (OUT / "hostile.json").write_text(json.dumps({"hostile": hostile}, indent=1) + "\n")
    (OUT / "envelopes.json").write_text(json.dumps(ENVELOPES, indent=1) + "\n")
    (OUT / "host_calls.json").write_text(json.dumps(
        {"minor_1": HOST_CALLS, "minor_2": {"metrics": METRICS_2, "calls": HOST_CALLS_2}},
        indent=1) + "\n")


if __name__ == "__main__":
    main()
