"""llm.complete against a real loopback OpenAI-compatible server and a Python model.

Budgets are refused with `limit` before anything is sent; a slow model is a
`timeout` at the call's deadline or the plugin's llm timeout; a storm of
completions runs into the budgets and the in-flight cap. The host serves a
healthy plugin afterwards every time.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from hypothesis import given, settings
from hypothesis import strategies as st
from test_http_fetch import cut_at_deadline

from loopback import Loopback
from wasmext import ConfigError, Host, PluginError, Runtime
from wasmext.config import HostConfig, load_config
from wasmext.services.llm.client import ChatAnswer, ChatRequest, parse_answer
from wasmext.services.llm.config import parse_llm
from wasmext.services.llm.service import LlmPolicy, LlmSettings, Price, estimate_tokens
from wasmext.testing import DATA_AT, guest_wat, make_host

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
ASK = {"messages": [{"role": "user", "content": "Summarise: the cat sat on the mat."}],
       "max_tokens": 100}


def llm_wasm(request: dict[str, Any], times: int = 1) -> bytes:
    """A minor-1 guest that sends `request` `times` times and answers the last answer."""
    raw = msgpack.packb({"op": "llm.complete", **request})
    call = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    body = call if times == 1 else f"""(local $i i32) (local $r i64)
      (loop $again
        (local.set $r {call})
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $again (i32.lt_u (local.get $i) (i32.const {times}))))
      (local.get $r)"""
    wat = guest_wat(body, imports=HOST_CALL, data=raw,
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 1})
    return bytes(wasmtime.wat2wasm(wat))


def completions(server: Loopback) -> list[dict[str, Any]]:
    return [s for s in server.seen if s["path"] == "/v1/chat/completions"]


def endpoint_host(server: Loopback, **policy: Any) -> Host:
    llm = LlmSettings(url=server.url("/v1"), model="m", prices={"m": Price(2.0, 4.0)},
                      default=LlmPolicy(**policy))
    return make_host(config=HostConfig(llm=llm, state_backend="memory"))


def refused(plugin: Any, code: str, within_s: float, meta: Any = None) -> str:
    started = time.monotonic()
    with pytest.raises(PluginError) as info:
        plugin.call("test", None, meta)
    assert time.monotonic() - started < within_s
    assert info.value.code == code, info.value.message
    return info.value.message


def healthy(host: Host, server: Loopback) -> None:
    server.server.completion.update(delay_s=0.0, usage=(12, 5), raw=None)
    if "healthy" not in host.plugins:
        host.add(llm_wasm(ASK), plugin_id="healthy", grants={"llm"},
                 limits={"timeout_ms": 5000})
    answer = host.plugins["healthy"].plugin.call("test", None, {"session": "fresh"}).value
    assert answer["text"] == "hello from the model"


def test_complete_through_an_endpoint(server: Loopback) -> None:
    with endpoint_host(server) as host:
        plugin = host.add(llm_wasm({**ASK, "temperature": 0.5}), plugin_id="asker",
                          grants={"llm"}, limits={"timeout_ms": 5000})
        answer = plugin.call("test").value
        assert answer == {"text": "hello from the model", "finish_reason": "stop", "model": "m",
                          "usage": {"input": 12, "output": 5}, "cost": (12 * 2 + 5 * 4) / 1e6}
        sent = json.loads(completions(server)[-1]["body"])
        assert (sent["model"], sent["max_tokens"], sent["temperature"]) == ("m", 100, 0.5)
        exposition = host.observe.metrics.exposition().decode()
        assert 'extension_llm_tokens_total{extension_id="asker",kind="input"} 12.0' in exposition
        assert 'extension_llm_tokens_total{extension_id="asker",kind="output"} 5.0' in exposition
        assert 'extension_llm_cost_total{extension_id="asker"} 4.4e-05' in exposition
        assert host.llm.usage("asker") == {"tokens": {"input": 12, "output": 5}, "cost": 4.4e-05}


@pytest.mark.parametrize(("asked", "sent_format"), [
    ({"json_mode": True}, {"type": "json_object"}),
    ({"response_format": {"type": "json_object"}}, {"type": "json_object"}),
    ({"response_format": {"type": "text"}}, {"type": "text"}),
    ({"json_mode": False}, None),
])
def test_json_mode_reaches_the_model_as_its_response_format(
        server: Loopback, asked: dict[str, Any], sent_format: dict[str, Any] | None) -> None:
    with endpoint_host(server) as host:
        plugin = host.add(llm_wasm({**ASK, **asked}), plugin_id="asker", grants={"llm"},
                          limits={"timeout_ms": 5000})
        assert plugin.call("test").value["text"] == "hello from the model"
        sent = json.loads(completions(server)[-1]["body"])
        assert sent.get("response_format") == sent_format


def test_models_come_from_the_plugins_allowlist(server: Loopback) -> None:
    with endpoint_host(server) as host:
        other = host.add(llm_wasm({**ASK, "model": "big"}), plugin_id="big", grants={"llm"},
                         limits={"timeout_ms": 5000})
        assert "not allowed" in refused(other, "denied", 2)
        assert completions(server) == []
        no_grant = host.add(llm_wasm(ASK), plugin_id="no-grant", limits={"timeout_ms": 5000})
        refused(no_grant, "denied", 2)
    with endpoint_host(server, models=("m", "big")) as host:
        allowed = host.add(llm_wasm({**ASK, "model": "big"}), plugin_id="big", grants={"llm"},
                           limits={"timeout_ms": 5000})
        assert allowed.call("test").value["model"] == "big"


def test_budgets_are_refused_before_sending(server: Loopback) -> None:
    server.server.completion["usage"] = (150, 100)  # 250 tokens a call, as the model says
    with endpoint_host(server, max_tokens_per_call=300, max_tokens_per_session=600,
                       max_tokens_per_day=1000) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="spender", grants={"llm"},
                          limits={"timeout_ms": 5000})
        s1 = {"session": "s1"}
        plugin.call("test", None, s1)
        plugin.call("test", None, s1)
        assert "session's token budget" in refused(plugin, "limit", 2, s1)
        assert len(completions(server)) == 2
        s2 = {"session": "s2"}
        plugin.call("test", None, s2)
        plugin.call("test", None, s2)
        assert "today's token budget" in refused(plugin, "limit", 2, {"session": "s3"})
        assert len(completions(server)) == 4
        greedy = host.add(llm_wasm({**ASK, "max_tokens": 5000}), plugin_id="greedy",
                          grants={"llm"}, limits={"timeout_ms": 5000})
        assert "per-call budget" in refused(greedy, "limit", 2)
        assert len(completions(server)) == 4
        healthy(host, server)


def test_a_slow_model_times_out_at_the_call_deadline(server: Loopback) -> None:
    server.server.completion["delay_s"] = 5.0
    with endpoint_host(server) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="waiter", grants={"llm"},
                          limits={"timeout_ms": 300})
        cut_at_deadline(plugin, 1.5)
        healthy(host, server)


def test_the_plugins_llm_timeout_applies_below_the_deadline(server: Loopback) -> None:
    server.server.completion["delay_s"] = 5.0
    with endpoint_host(server, timeout_ms=200) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="waiter", grants={"llm"},
                          limits={"timeout_ms": 5000})
        refused(plugin, "timeout", 1.5)
        healthy(host, server)


def test_a_storm_inside_one_call_runs_into_the_budget(server: Loopback) -> None:
    server.server.completion["usage"] = (150, 100)
    with endpoint_host(server, max_tokens_per_session=100_000, max_tokens_per_day=2000) as host:
        storm = host.add(llm_wasm(ASK, times=500), plugin_id="storm", grants={"llm"},
                         limits={"timeout_ms": 10_000, "host_call_timeout_ms": 10_000})
        refused(storm, "limit", 10)
        assert len(completions(server)) <= 2000 // 250
        healthy(host, server)


def test_a_concurrent_storm_meets_the_in_flight_cap(server: Loopback) -> None:
    server.server.completion["delay_s"] = 0.3
    with endpoint_host(server, max_in_flight=2) as host:
        host.add(llm_wasm(ASK), plugin_id="crowd", grants={"llm"}, limits={"timeout_ms": 5000})
        codes: list[str] = []

        def ask(i: int) -> None:
            try:
                host.plugins["crowd"].plugin.call("test", None, {"session": f"c{i}"})
                codes.append("ok")
            except PluginError as err:
                codes.append(err.code)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(codes) == 8 and set(codes) <= {"ok", "limit"}
        assert "limit" in codes and 1 <= codes.count("ok") <= 8
        healthy(host, server)


def test_a_python_callable_is_the_model() -> None:
    asked: list[ChatRequest] = []

    def model(req: ChatRequest) -> ChatAnswer:
        asked.append(req)
        return ChatAnswer('{"summary": "a cat"}', "stop", 7, 3, req.model)

    config = HostConfig(llm=LlmSettings(model="py"), state_backend="memory")
    with Host(config, runtime=Runtime(cache=False), plugin_dirs=[], llm=model) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="py", grants={"llm"})
        assert plugin.call("test").value["text"] == '{"summary": "a cat"}'
        assert asked[0].model == "py" and asked[0].max_tokens == 100
        assert 0 < asked[0].timeout_s <= 1.0  # the call's deadline (timeout_ms 1000)


def test_without_a_model_the_op_is_unavailable() -> None:
    config = HostConfig(llm=LlmSettings(model="none"), state_backend="memory")
    with make_host(config=config) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="lonely", grants={"llm"})
        refused(plugin, "unavailable", 2)


def test_a_broken_endpoint_is_unavailable(server: Loopback) -> None:
    llm = LlmSettings(url=server.url("/nothing-here"), model="m")
    with make_host(config=HostConfig(llm=llm, state_backend="memory")) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="broken", grants={"llm"})
        assert "HTTP 404" in refused(plugin, "unavailable", 2)


@pytest.mark.parametrize("request_", [
    {"messages": []}, {"messages": "hi"}, {"messages": [{"role": "god", "content": "x"}]},
    {**ASK, "max_tokens": 0}, {**ASK, "temperature": 9}, {**ASK, "temperature": True},
    {**ASK, "json_mode": "yes"}, {**ASK, "response_format": {"type": "json_schema"}},
    {**ASK, "response_format": {"type": "json_object", "json_schema": {"x": 1}}},
    {**ASK, "json_mode": True, "response_format": {"type": "text"}},
])
def test_invalid_requests(server: Loopback, request_: dict[str, Any]) -> None:
    with endpoint_host(server) as host:
        refused(host.add(llm_wasm(request_), plugin_id="bad", grants={"llm"}), "invalid", 2)
        assert completions(server) == []


def test_the_llm_section_of_the_config(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text("""
[llm]
url = "http://127.0.0.1:9/v1"
model = "small"
[llm.prices.small]
input = 0.5
output = 1.5
[llm.default]
max_tokens_per_call = 100
[llm.plugins.summarize]
models = ["small", "big"]
timeout_ms = 60000
""")
    llm = load_config(path).llm
    assert (llm.url, llm.model, llm.prices["small"]) == ("http://127.0.0.1:9/v1", "small",
                                                         Price(0.5, 1.5))
    assert llm.policy("summarize") == LlmPolicy(models=("small", "big"), timeout_ms=60000,
                                                max_tokens_per_call=100)
    assert llm.policy("other").max_tokens_per_call == 100
    path.write_text("[llm.default]\nmax_tokens_per_call = -1\n")
    with pytest.raises(ConfigError, match=r"llm\.default\.max_tokens_per_call"):
        load_config(path)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=3) |
                           st.dictionaries(st.text(max_size=8), kids, max_size=3), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["choices", "usage", "model", "x"]), json_values,
                       max_size=4))
def test_any_answer_document_parses_or_is_a_value_error(doc: dict[str, Any]) -> None:
    try:
        answer = parse_answer(doc, "m")
    except ValueError:
        return
    assert isinstance(answer.text, str) and answer.input_tokens >= 0


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["url", "model", "prices", "default", "plugins", "z"]),
                       json_values, max_size=4))
def test_any_llm_section_parses_or_is_a_config_error(raw: dict[str, Any]) -> None:
    with contextlib.suppress(ConfigError):
        parse_llm(raw, None)


@pytest.mark.parametrize("headers_too", [False, True])
def test_a_model_dripping_its_answer_ends_at_the_call_deadline(server: Loopback,
                                                               headers_too: bool) -> None:
    # One byte every 50 ms: the answer would take many seconds, and no single read
    # waits long enough for a per-read timeout.
    server.server.completion.update(drip_s=0.05, drip_headers=headers_too)
    with endpoint_host(server) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="dripped", grants={"llm"},
                          limits={"timeout_ms": 1000, "host_call_timeout_ms": 1000})
        started = time.monotonic()
        cut_at_deadline(plugin, 3)
        assert time.monotonic() - started >= 0.5  # read until the deadline, not refused early
        assert server.server.sent_bytes < 60  # about 20 bytes a second, never the answer
        server.server.completion.update(drip_s=0.0)
        healthy(host, server)


LONG_ANSWER = "word " * 720  # 3600 bytes: about 900 tokens of text
LIES = {
    "missing": None,
    "negative": {"prompt_tokens": -5000, "completion_tokens": -5000, "total_tokens": -10000},
    "tiny": (1, 1),  # far fewer tokens than the 3600 bytes of the answer
    "strings": {"prompt_tokens": "0", "completion_tokens": "0"},
    "absurd": (10**15, 10**15),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_model_server_cannot_refund_the_budget(server: Loopback, lie: str) -> None:
    server.server.completion.update(text=LONG_ANSWER, usage=LIES[lie])
    with endpoint_host(server, max_tokens_per_session=3000,
                       max_tokens_per_day=5000) as host:
        plugin = host.add(llm_wasm({**ASK, "max_tokens": 900}), plugin_id="spender",
                          grants={"llm"}, limits={"timeout_ms": 5000})
        codes, messages = [], set()
        started = time.monotonic()
        for _ in range(12):
            try:
                plugin.call("test", None, {"session": "one"})
                codes.append("ok")
            except PluginError as err:
                codes.append(err.code)
                messages.add(err.message.split(" is spent")[0])
        assert time.monotonic() - started < 20
        assert messages <= {"plugin spender: the session's token budget 3000",
                            "plugin spender: today's token budget 5000"}
        # Each call is charged at least its reservation (912 tokens): 3 fit in 3000.
        assert 1 <= codes.count("ok") <= 3 and set(codes) == {"ok", "limit"}
        assert len(completions(server)) == codes.count("ok")
        day = time.strftime("%Y-%m-%d", time.gmtime())
        assert host.llm.ledger.used("spender", day) >= 912 * codes.count("ok")
        server.server.completion.update(text="hello from the model")
        healthy(host, server)


def test_honest_usage_still_replaces_the_reservation(server: Loopback) -> None:
    server.server.completion.update(text=LONG_ANSWER, usage=(20, 460))  # 8 bytes a token
    with endpoint_host(server, max_tokens_per_session=3000,
                       max_tokens_per_day=5000) as host:
        plugin = host.add(llm_wasm({**ASK, "max_tokens": 900}), plugin_id="honest",
                          grants={"llm"}, limits={"timeout_ms": 5000})
        passed = 0
        with contextlib.suppress(PluginError):
            for _ in range(12):
                plugin.call("test", None, {"session": "one"})
                passed += 1
        assert passed == 5  # 480 a call, and the sixth's reservation of 912 does not fit
        day = time.strftime("%Y-%m-%d", time.gmtime())
        assert host.llm.ledger.used("honest", day) == 5 * 480


def test_a_request_without_max_tokens_reserves_the_per_call_budget(server: Loopback) -> None:
    server.server.completion.update(text=LONG_ANSWER, usage=None)
    ask = {"messages": ASK["messages"]}
    with endpoint_host(server, max_tokens_per_call=1000, max_tokens_per_session=2500,
                       max_tokens_per_day=5000) as host:
        plugin = host.add(llm_wasm(ask), plugin_id="open-ended", grants={"llm"},
                          limits={"timeout_ms": 5000})
        plugin.call("test", None, {"session": "one"})
        plugin.call("test", None, {"session": "one"})
        assert "session's token budget" in refused(plugin, "limit", 2, {"session": "one"})
        sent = json.loads(completions(server)[-1]["body"])
        # What the prompt leaves: its estimate is 15 ("Summarise" 3, six words, ":", ".", 4).
        assert sent["max_tokens"] == 1000 - estimate_tokens(ASK["messages"]) == 1000 - 15
        day = time.strftime("%Y-%m-%d", time.gmtime())
        assert host.llm.ledger.used("open-ended", day) == 2000


# 331 characters, 993 UTF-8 bytes of CJK: 4 characters a token made it 86 tokens, where
# tokenizers spend about one a character, and a byte-level one up to one a byte.
CJK = "请总结这段文字\uff1a" + "猫坐在垫子上\uff0c狗在院子里跑来跑去。" * 19


def test_a_cjk_prompt_is_reserved_at_what_it_can_cost(server: Loopback) -> None:
    """HOLE: the estimate (4 characters a token) reserved 86 tokens for a prompt a model
    reports at up to 993, so the per-call budget let it through and concurrent calls
    could overrun the others. Now every byte outside a lowercase ASCII word is a token:
    the model's worst report fits the reservation, and a budget below it is `limit`
    before anything is sent."""
    prompt_bytes = len(CJK.encode())
    ask = {"messages": [{"role": "user", "content": CJK}]}
    estimate = estimate_tokens(ask["messages"])
    assert estimate >= prompt_bytes > 4 * (len(CJK) // 4 + 4)
    # The server reports one token per byte of the prompt: the most a tokenizer spends.
    server.server.completion.update(usage=(prompt_bytes, 20))
    with endpoint_host(server, max_tokens_per_call=2048, max_tokens_per_session=10_000,
                       max_tokens_per_day=10_000) as host:
        plugin = host.add(llm_wasm(ask), plugin_id="cjk", grants={"llm"},
                          limits={"timeout_ms": 5000})
        answer = plugin.call("test", None, {"session": "one"}).value
        assert answer["usage"] == {"input": prompt_bytes, "output": 20}
        sent = json.loads(completions(server)[-1]["body"])
        reserved = 2048  # no max_tokens: the whole per-call budget, the model asked for
        assert sent["max_tokens"] == reserved - estimate  # what the prompt leaves
        assert answer["usage"]["input"] <= estimate  # the reservation covers the prompt
        assert answer["usage"]["input"] + answer["usage"]["output"] <= reserved
        day = time.strftime("%Y-%m-%d", time.gmtime())
        assert host.llm.ledger.used("cjk", day) == prompt_bytes + 20  # as reported
    # A per-call budget below what the prompt can cost: refused, nothing sent.
    with endpoint_host(server, max_tokens_per_call=600) as host:
        sent_before = len(completions(server))
        tight = host.add(llm_wasm({**ask, "max_tokens": 50}), plugin_id="cjk-tight",
                         grants={"llm"}, limits={"timeout_ms": 5000})
        message = refused(tight, "limit", 2)
        assert f"{estimate + 50} tokens" in message and "per-call budget 600" in message
        assert CJK[:4] not in message  # the prompt is not echoed
        assert len(completions(server)) == sent_before
        healthy(host, server)


def _nested(depth: int, inner: str = '"x"') -> str:
    return "[" * depth + inner + "]" * depth


def _answer_with(message: str) -> bytes:
    return ('{"choices": [{"finish_reason": "stop", "message": ' + message + '}]}').encode()


@pytest.mark.parametrize("raw", [
    (_nested(200_000)).encode(),                                       # past json's recursion
    _answer_with('{"role": "assistant", "content": "hi", "x": ' + _nested(100) + "}"),
], ids=["200000-deep", "100-deep-inside"])
def test_a_deeply_nested_answer_is_a_named_error(server: Loopback, raw: bytes) -> None:
    server.server.completion["raw"] = raw
    with endpoint_host(server) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="deep", grants={"llm"},
                          limits={"timeout_ms": 5000})
        message = refused(plugin, "unavailable", 5)
        assert "nested deeper than 64" in message
        assert "Traceback" not in message and "RecursionError" not in message
        healthy(host, server)


@pytest.mark.parametrize("depth", [70, 200_000])
def test_deep_tool_call_arguments_stay_a_string(depth: int) -> None:
    # Like arguments that are not JSON: the tool gets the text, never a RecursionError.
    doc = {"choices": [{"message": {"content": "", "tool_calls": [
        {"id": "1", "function": {"name": "t", "arguments": _nested(depth)}}]}}]}
    answer = parse_answer(doc, "m")
    assert answer.tool_calls[0]["args"] == {"_raw": _nested(depth)}


@pytest.mark.parametrize(("key", "url_user", "authorization"), [
    ("k-123", "", "Bearer k-123"),
    (None, "user:pw@", "Basic dXNlcjpwdw=="),
    (None, "", None),
])
def test_the_endpoint_receives_its_headers_on_every_request(
        server: Loopback, key: str | None, url_user: str, authorization: str | None) -> None:
    from wasmext.services.llm.client import OpenAIClient

    client = OpenAIClient(server.url("/v1").replace("://", f"://{url_user}"), key)
    try:
        for _ in range(2):  # the first request and one on the kept-alive connection
            answer = client.chat(ChatRequest([{"role": "user", "content": "hi"}], "m",
                                             timeout_s=5))
            assert answer.text == "hello from the model"
            sent = completions(server)[-1]["headers"]
            assert sent.get("authorization") == authorization
            assert sent["accept-encoding"] == "identity"
            assert sent["content-type"] == "application/json"
    finally:
        client.close()
