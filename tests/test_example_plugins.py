"""The example plugins hook by hook (the agent session in test_run covers them together)."""

from __future__ import annotations

import pytest

from conftest import Built
from wasmext import PluginError, Runtime


def test_text_tags_dispatches_by_pattern(built: Built, runtime: Runtime) -> None:
    p = runtime.load(built["text-tags"])
    tag = {"attrs": {}, "content": "quiet é"}
    assert p.call("on_tag", {"tag": "upper", **tag}).value == "QUIET é"
    assert p.call("on_tag", {"tag": "redact-card", **tag}).value == "[REDACTED]"
    with pytest.raises(PluginError) as info:
        p.call("on_tag", {"tag": "other", **tag})
    assert info.value.code == "unhandled"
    ext = {"answer": "one two  three", "query": "q", "previous": {"a": {}, "b": {}}}
    assert p.call("output_extension", {"name": "wordcount", "param": "brief", **ext}).value == 3
    assert p.call("output_extension", {"name": "wordcount", "param": None, **ext}).value == {
        "words": 3, "chars": 14, "previous": ["a", "b"]}


def test_text_tags_trims_messages_and_keeps_the_rest(built: Built, runtime: Runtime) -> None:
    p = runtime.load(built["text-tags"])
    msgs = [{"role": "user", "content": "\t hi \n", "id": 7}, {"role": "assistant"}]
    result = p.call("on_input_messages", msgs)
    assert result.value == [{"role": "user", "content": "hi", "id": 7}, {"role": "assistant"}]
    assert p.call("on_input_messages", [{"role": "user", "content": "hi"}]).changed is False


def test_agent_guard_settings(built: Built, runtime: Runtime) -> None:
    p = runtime.load(built["agent-guard"], settings={"blocked_tools": "rm, curl",
                                                     "banned_words": "secret,token"})
    assert p.call("before_tool", {"tool_name": "curl", "args": {}}).value["continue"] is False
    assert p.call("before_tool", {"tool_name": "shell", "args": {}}).value["continue"] is True
    verdict = p.call("validator", {"message": {"payload": "my TOKEN"}, "context": {},
                                   "config": {}}).value
    assert verdict == {"status": "reject", "reason": "banned word: token"}
    reg = p.registration.extra
    assert reg["tool_guidance"]["preferred"] == ["calc"]
    assert reg["prompt"][1]["when"] == {"tag_present": "guarded"}


def test_turn_audit_outside_middleware_reports_the_host_error(built: Built,
                                                             runtime: Runtime) -> None:
    p = runtime.load(built["turn-audit"])
    with pytest.raises(PluginError) as info:
        p.call("turn", {"metadata": {}})
    assert info.value.code == "unsupported"  # a bare Runtime has no middleware: no next op
