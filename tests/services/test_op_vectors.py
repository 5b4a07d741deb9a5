"""abi/vectors/host_calls.json: the minor-1 and minor-2 ops' verdicts, from WAT guests.

tests/sdks/test_minor1_sdks.py sends the same vectors through every SDK's
conformance plugin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime

from wasmext import Host, PluginError, Runtime
from wasmext.config import HostConfig
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmSettings
from wasmext.testing import DATA_AT, guest_wat

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "abi" / "vectors" /
                      "host_calls.json").read_text())["minor_1"]
HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


def vector_host() -> Host:
    """The host the vectors describe: model "vector-model", no prices, no agents."""
    def model(req: ChatRequest) -> ChatAnswer:
        return ChatAnswer("vector answer", "stop", 3, 2, req.model)

    return Host(HostConfig(llm=LlmSettings(model="vector-model"), state_backend="memory"),
                runtime=Runtime(cache=False),
                plugin_dirs=[], llm=model)


def verdict(answer: dict[str, Any]) -> dict[str, Any]:
    return {"value": answer["value"]} if answer["ok"] else {"code": answer["error"]["code"]}


def expected(vector: dict[str, Any]) -> dict[str, Any]:
    return {"value": vector["value"]} if "value" in vector else {"code": vector["code"]}


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: f"{v['request']['op']}")
def test_vector_from_a_wat_guest(vector: dict[str, Any]) -> None:
    raw = msgpack.packb(vector["request"])
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                    imports=HOST_CALL, data=raw,
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 1})
    with vector_host() as host:
        plugin = host.add(bytes(wasmtime.wat2wasm(wat)), plugin_id="vec",
                          grants=set(vector["grants"]))
        try:
            got = {"value": plugin.call("test").value}
        except PluginError as err:
            got = {"code": err.code}
        assert got == expected(vector), vector


MINOR_2 = json.loads((Path(__file__).resolve().parents[2] / "abi" / "vectors" /
                      "host_calls.json").read_text())["minor_2"]


@pytest.mark.parametrize("vector", MINOR_2["calls"], ids=lambda v: f"{v['request']['op']}")
def test_minor_2_vector_from_a_wat_guest(vector: dict[str, Any]) -> None:
    raw = msgpack.packb(vector["request"])
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                    imports=HOST_CALL, data=raw,
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 2,
                                  "metrics": MINOR_2["metrics"]})
    with vector_host() as host:
        plugin = host.add(bytes(wasmtime.wat2wasm(wat)), plugin_id="vec")
        try:
            got = {"value": plugin.call("test").value}
        except PluginError as err:
            got = {"code": err.code}
        assert got == expected(vector), vector
