"""The example plugins hook by hook, called directly (`wasmext run` on the demo
transcript covers them together, in tests/cli/test_run.py).

Data shapes follow docs/hooks.md exactly; every answer is compared whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support import Built
from wasmext import ConfigError, Plugin, PluginError, Runtime
from wasmext.testing import make_host


def load(runtime: Runtime, folder: Path, **options: Any) -> Plugin:
    plugin = runtime.load(folder, **options)
    assert isinstance(plugin, Plugin)  # a wasmext-ABI module, not an Extism one
    return plugin


# -- text-tags: on_tag, output_extension, on_input_messages ------------------------------


@pytest.fixture
def text_tags(built: Built, runtime: Runtime) -> Plugin:
    return load(runtime, built["text-tags"])


def tag(name: str, content: str, **attrs: str) -> dict[str, Any]:
    return {"tag": name, "attrs": attrs, "content": content}


def test_text_tags_registers_every_pattern(text_tags: Plugin) -> None:
    assert [(h.hook, h.pattern, h.priority) for h in text_tags.registration.hooks] == [
        ("on_tag", "upper", 60), ("on_tag", "redact*", 60),
        ("output_extension", "wordcount", 60), ("output_extension", "shout", 60),
        ("on_input_messages", None, 60)]
    assert text_tags.registration.extra == {}


def test_upper_changes_only_ascii_letters(text_tags: Plugin) -> None:
    result = text_tags.call("on_tag", tag("upper", "quiet é ß 😀 Mixed-Case 42"))
    assert result.changed and result.value == "QUIET é ß 😀 MIXED-CASE 42"
    assert text_tags.call("on_tag", tag("upper", "")).value == ""


@pytest.mark.parametrize("name", ["redact", "redact-email", "redactions"])
def test_redact_prefix_pattern(text_tags: Plugin, name: str) -> None:
    result = text_tags.call("on_tag", tag(name, "ann@example.com", kind="mail"))
    assert result.value == "[REDACTED]"


@pytest.mark.parametrize("name", ["other", "re", "uppercase", "Upper", "x-redact"])
def test_tags_no_pattern_matches_are_unhandled(text_tags: Plugin, name: str) -> None:
    with pytest.raises(PluginError) as info:
        text_tags.call("on_tag", tag(name, "x"))
    assert info.value.code == "unhandled"


def test_upper_without_content_is_invalid(text_tags: Plugin) -> None:
    with pytest.raises(PluginError) as info:
        text_tags.call("on_tag", {"tag": "upper", "attrs": {}})
    assert info.value.code == "invalid"


def ext(name: str, param: str | None, answer: str,
        previous: list[Any] | None = None) -> dict[str, Any]:
    return {"name": name, "param": param, "answer": answer, "query": "count this",
            "previous": previous or []}


def test_wordcount_brief_is_the_number_of_words(text_tags: Plugin) -> None:
    answer = "  one two\tthree\nfour\r\n  fïve 😀 "
    assert text_tags.call("output_extension", ext("wordcount", "brief", answer)).value == 6
    assert text_tags.call("output_extension", ext("wordcount", "brief", "")).value == 0
    assert text_tags.call("output_extension", ext("wordcount", "brief", " \t\n")).value == 0


def test_wordcount_full_counts_code_points_and_names_previous(text_tags: Plugin) -> None:
    answer = "héllo wörld 😀"  # 13 code points, 18 bytes
    # every earlier result, a repeated name too; an entry that is not a result map
    # still counts (an empty name)
    previous = [{"name": "shout", "content": {"text": "X"}}, {"name": "other", "content": 3},
                {"name": "shout", "content": {"text": "Y"}}, 7]
    value = text_tags.call("output_extension", ext("wordcount", None, answer, previous)).value
    assert value == {"words": 3, "chars": 13, "previous": ["shout", "other", "shout", ""]}
    value = text_tags.call("output_extension", ext("wordcount", "full", "a b")).value
    assert value == {"words": 2, "chars": 3, "previous": []}


def test_shout_uppercases_and_shows_the_chain(text_tags: Plugin) -> None:
    previous = [{"name": "wordcount", "content": {"words": 2, "chars": 11, "previous": []}}]
    value = text_tags.call("output_extension", ext("shout", None, "héllo wörld", previous)).value
    assert value == {"text": "HéLLO WöRLD", "saw": ["wordcount"]}
    assert text_tags.call("output_extension", ext("shout", None, "hi")).value == {
        "text": "HI", "saw": []}


def test_unknown_extension_is_unhandled(text_tags: Plugin) -> None:
    with pytest.raises(PluginError) as info:
        text_tags.call("output_extension", ext("summary", None, "x"))
    assert info.value.code == "unhandled"


def test_trim_messages_keeps_keys_order_and_non_string_content(text_tags: Plugin) -> None:
    messages = [
        {"role": "system", "content": "  Be brief. \n", "id": 1},
        {"name": "ann", "role": "user", "content": "\t\v\f héllo 😀\r\n"},
        {"role": "tool", "content": {"parts": [" x "]}},
        {"role": "assistant"},
        {"role": "user", "content": "   "},
    ]
    result = text_tags.call("on_input_messages", messages)
    assert result.changed
    assert result.value == [
        {"role": "system", "content": "Be brief.", "id": 1},
        {"name": "ann", "role": "user", "content": "héllo 😀"},
        {"role": "tool", "content": {"parts": [" x "]}},
        {"role": "assistant"},
        {"role": "user", "content": ""},
    ]
    assert [list(m) for m in result.value] == [
        ["role", "content", "id"], ["name", "role", "content"], ["role", "content"], ["role"],
        ["role", "content"]]


def test_trim_messages_unchanged_when_nothing_to_trim(text_tags: Plugin) -> None:
    messages = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": ""}]
    assert text_tags.call("on_input_messages", messages).changed is False
    assert text_tags.call("on_input_messages", []).changed is False


def test_trim_messages_wants_an_array(text_tags: Plugin) -> None:
    with pytest.raises(PluginError) as info:
        text_tags.call("on_input_messages", "  hi  ")
    assert info.value.code == "invalid"


# -- agent-guard: lifecycle, validator, prompt additions, tool guidance -------------------


def lifecycle(event: str, **fields: Any) -> dict[str, Any]:
    return {"event": event, "session_id": "s1", "outputs": [], **fields}


def pipeline_data(payload: str) -> dict[str, Any]:
    return {"message": {"payload": payload, "metadata": {}}, "context": {}, "config": {}}


def test_agent_guard_registration_map(built: Built, runtime: Runtime) -> None:
    reg = load(runtime, built["agent-guard"]).registration
    assert [(h.hook, h.priority) for h in reg.hooks] == [
        ("session_start", 80), ("before_model", 80), ("before_tool", 80),
        ("after_tool", 80), ("validator", 80)]
    assert reg.extra == {
        "prompt": [
            {"position": "system_suffix", "content": "Never run shell commands."},
            {"position": "user_prefix", "content": "[guarded] ",
             "when": {"tag_present": "guarded"}},
        ],
        "tool_guidance": {"preferred": ["calc"], "avoided": ["shell"],
                          "order": ["clock", "calc"]},
    }


def test_agent_guard_lifecycle_defaults(built: Built, runtime: Runtime) -> None:
    p = load(runtime, built["agent-guard"])
    assert p.call("session_start", lifecycle("session_start")).value == {
        "continue": True, "system_message": "agent-guard: tools on the block list are refused."}
    assert p.call("before_model", lifecycle("before_model", messages=[], model="m")).value == {
        "continue": True, "system_message": "agent-guard: answer briefly."}
    assert p.call("before_tool", lifecycle("before_tool", tool_name="shell",
                                           args={"command": "ls"})).value == {
        "continue": False, "stop_reason": "agent-guard blocked tool shell"}
    assert p.call("before_tool", lifecycle("before_tool", tool_name="calc", args={})).value == {
        "continue": True, "checked": "calc"}
    assert p.call("after_tool", lifecycle("after_tool", tool_name="calc",
                                          result={"status": "ok"})).value == {"continue": True}


def test_agent_guard_blocked_tools_setting(built: Built, runtime: Runtime) -> None:
    p = load(runtime, built["agent-guard"], settings={"blocked_tools": " rm,\tcurl ,, "})
    for name in ("rm", "curl"):
        assert p.call("before_tool", lifecycle("before_tool", tool_name=name, args={})).value == {
            "continue": False, "stop_reason": f"agent-guard blocked tool {name}"}
    for name in ("shell", "Curl", "cur", "rm2", ""):  # exact, case-sensitive names
        assert p.call("before_tool", lifecycle("before_tool", tool_name=name, args={})).value == {
            "continue": True, "checked": name}
    open_all = load(runtime, built["agent-guard"], settings={"blocked_tools": ""})
    assert open_all.call("before_tool", lifecycle("before_tool", tool_name="shell",
                                                  args={})).value["continue"] is True


def test_agent_guard_validator(built: Built, runtime: Runtime) -> None:
    p = load(runtime, built["agent-guard"])
    assert p.call("validator", pipeline_data("What is my PassWord?")).value == {
        "status": "reject", "reason": "banned word: password"}
    assert p.call("validator", pipeline_data("passwords: héllo")).value == {
        "status": "reject", "reason": "banned word: password"}
    assert p.call("validator", pipeline_data("héllo, pass word")).value == {"status": "ok"}
    custom = load(runtime, built["agent-guard"], settings={"banned_words": "secret, token"})
    assert custom.call("validator", pipeline_data("an API TOKEN, a Secret")).value == {
        "status": "reject", "reason": "banned word: secret"}  # the first listed word found
    assert custom.call("validator", pipeline_data("my password")).value == {"status": "ok"}


def test_agent_guard_bad_input_is_invalid(built: Built, runtime: Runtime) -> None:
    p = load(runtime, built["agent-guard"])
    bad = [("before_tool", lifecycle("before_tool", args={})),
           ("validator", {"message": {"metadata": {}}, "context": {}, "config": {}}),
           ("validator", "text")]
    for hook, data in bad:
        with pytest.raises(PluginError) as info:
            p.call(hook, data)
        assert info.value.code == "invalid", hook
    # A setting of another type than its default's never reaches the guest: the host
    # refuses it at load, naming the field.
    with pytest.raises(ConfigError, match="setting 'blocked_tools' must be a string"):
        load(runtime, built["agent-guard"], settings={"blocked_tools": ["shell"]})


# -- turn-audit: middleware with next ----------------------------------------------------

TURN = {"turn_id": "t1", "input": {"role": "user", "content": "hi"}, "messages": [],
        "metadata": {}}
STEP = {"turn_id": "t1", "step": 0, "messages": [], "metadata": {},
        "tools": [{"name": "calc", "description": "c"}, {"name": "debug", "description": "d"}]}
TOOL_CALL = {"turn_id": "t1", "step": 0, "call_id": "c1", "tool": "calc",
             "args": {"expression": "  6*7 "}, "metadata": {}}


def test_turn_audit_registration(built: Built, runtime: Runtime) -> None:
    reg = load(runtime, built["turn-audit"]).registration
    assert [(h.hook, h.priority) for h in reg.hooks] == [
        ("turn", 70), ("step", 70), ("tool_call", 70)]


@pytest.mark.parametrize(("hook", "data"), [("turn", TURN), ("step", STEP),
                                            ("tool_call", TOOL_CALL),
                                            ("tool_call", {**TOOL_CALL, "tool": "clock"}),
                                            ("turn", "not a map")])
def test_turn_audit_passes_a_failed_next_on(built: Built, runtime: Runtime, hook: str,
                                            data: Any) -> None:
    # A plugin called on its own is outside any middleware chain, so this host
    # answers `next` with "unsupported"; the layer must turn that into its own
    # error with the host's code. This changes when `next` lands in the bare
    # Runtime: then expect the inner result (see the Host session tests below).
    p = load(runtime, built["turn-audit"])
    with pytest.raises(PluginError) as info:
        p.call(hook, data)
    assert info.value.code == "unsupported"
    assert "next" in info.value.message


def test_turn_audit_in_a_host_session(built: Built) -> None:
    """Inside a Host session `next` runs the inner layers: pre and post both show."""
    seen: list[dict[str, Any]] = []

    def core(result: dict[str, Any]) -> Any:
        def run(data: dict[str, Any]) -> dict[str, Any]:
            seen.append(data)
            return result
        return run

    with make_host(built["turn-audit"]) as host, host.session() as s:
        text = {"finish_reason": "text_response", "response": "Hi"}
        out = s.middleware("turn", {**TURN, "metadata": {"k": 1, "audited_by": "x"}}, core(text))
        assert out == {"finish_reason": "text_response", "response": "Hi [audited]"}
        assert seen[-1]["metadata"] == {"k": 1, "audited_by": "turn-audit"}

        stopped = {"finish_reason": "max_steps", "response": "Hi"}
        assert s.middleware("turn", TURN, core(stopped)) == stopped
        assert seen[-1]["metadata"] == {"audited_by": "turn-audit"}

        inner = {"response": "r", "tool_calls": []}
        assert s.middleware("step", STEP, core(inner)) == inner
        assert seen[-1]["tools"] == [{"name": "calc", "description": "c"}]

        ok = {"status": "ok", "output": 42}
        args = {"expression": " \t6*7\n", "precision": 2}
        assert s.middleware("tool_call", {**TOOL_CALL, "args": args}, core(ok)) == {
            "status": "ok", "output": 42, "audited": True}
        assert seen[-1]["args"] == {"expression": "6*7", "precision": 2}

        failed = {"status": "error", "output": None, "error": {"message": "no"}}
        other = {**TOOL_CALL, "tool": "clock", "args": {"expression": " x "}}
        assert s.middleware("tool_call", other, core(failed)) == failed
        assert seen[-1]["args"] == {"expression": " x "}
        assert not [e for e in s.trace.events if e.outcome == "failed"]


def test_turn_audit_hidden_tools_setting(built: Built) -> None:
    folder: Path = built["turn-audit"]
    tools = [{"name": n, "description": n} for n in ("calc", "debug", "clock", "admin")]
    seen: list[list[dict[str, str]]] = []

    def core(data: dict[str, Any]) -> dict[str, Any]:
        seen.append(data["tools"])
        return {"response": "", "tool_calls": []}

    settings = {"hidden_tools": " admin ,\tclock"}
    with make_host((folder, {"settings": settings})) as host, host.session() as s:
        s.middleware("step", {**STEP, "tools": tools}, core)
    assert [t["name"] for t in seen[-1]] == ["calc", "debug"]
