"""Ordering and chaining of transform callbacks, pinned rule by rule and against
a plain Python model with hypothesis."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import Built
from wasmext import ConfigError, HookAborted, Host, Runtime
from wasmext.config import HostConfig

MODES = ["append", "stop", "fail", "trap", "unchanged", "bad"]


def kit_host(built: Built, specs: list[tuple[str, int, str, str]],
             failure: dict[str, str] | None = None) -> Host:
    """A host with one test-kit plugin per spec: (id, priority, mode, source)."""
    host = Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[])
    for pid, prio, mode, source in specs:
        host.add(built["test-kit"], plugin_id=pid, priority=prio, source_kind=source,
                 settings={"mode": mode, "tag": f"[{pid}]"},
                 failure=(failure or {}).get(pid))
    return host


def model(specs: list[tuple[str, int, str, str]], text: str) -> tuple[str, list[str], str | None]:
    """The documented rules in plain Python: (value, changed_by, stopped_by)."""
    rank = {"user": 0, "explicit": 1, "workspace": 2}
    order = sorted(range(len(specs)), key=lambda i: (-specs[i][1], rank[specs[i][3]], i))
    changed, stopped = [], None
    for i in order:
        pid, _, mode, _ = specs[i]
        if mode in ("append", "stop"):
            text += f"[{pid}]"
            changed.append(pid)
        if mode == "stop":
            stopped = pid
            break
    return text, changed, stopped


def test_priority_then_source_then_registration(built: Built) -> None:
    host = kit_host(built, [("a", 50, "append", "workspace"), ("b", 90, "append", "workspace"),
                            ("c", 50, "append", "user"), ("d", 50, "append", "workspace")])
    with host.session() as s:
        result = s.on_plain_text("x")
    assert result.value == "x[b][c][a][d]"
    assert result.original == "x"
    assert result.changed_by == ["b", "c", "a", "d"]


def test_failed_plugins_are_skipped_keeping_the_value(built: Built) -> None:
    host = kit_host(built, [("a", 90, "append", "explicit"), ("b", 80, "fail", "explicit"),
                            ("c", 70, "trap", "explicit"), ("d", 60, "bad", "explicit"),
                            ("e", 50, "append", "explicit")])
    with host.session() as s:
        result = s.on_plain_text("x")
        assert result.value == "x[a][e]"
        assert result.failed == ["b", "c", "d"]
        # The last word on each plugin (d answered, then its value was refused).
        outcomes = {e.plugin_id: e.outcome for e in s.trace.events if e.hook == "on_plain_text"}
    assert outcomes == {"a": "changed", "b": "failed", "c": "failed", "d": "failed",
                        "e": "changed"}
    assert {f.plugin_id for f in host.faults} == {"b", "c"}


def test_stop_short_circuits(built: Built) -> None:
    host = kit_host(built, [("a", 90, "append", "explicit"), ("b", 80, "stop", "explicit"),
                            ("c", 70, "append", "explicit")])
    with host.session() as s:
        result = s.on_plain_text("x")
    assert (result.value, result.stopped_by) == ("x[a][b]", "b")


def test_fail_closed_aborts(built: Built) -> None:
    host = kit_host(built, [("a", 90, "append", "explicit"), ("b", 80, "fail", "explicit")],
                    failure={"b": "closed"})
    with host.session() as s, pytest.raises(HookAborted) as info:
        s.on_plain_text("x")
    assert info.value.plugin_id == "b"
    assert info.value.cause is not None


def test_reload_policy_backs_off_then_retries(built: Built) -> None:
    host = kit_host(built, [("a", 50, "trap", "explicit")], failure={"a": "reload"})
    with host.session() as s:
        s.on_plain_text("x")
        s.on_plain_text("x")
        outcomes = [e.outcome for e in s.trace.events if e.plugin_id == "a"]
    assert outcomes == ["failed", "skipped"]


def test_hooks_switch_off(built: Built) -> None:
    host = kit_host(built, [("a", 50, "append", "explicit")])
    host.config = HostConfig(hooks=False)
    with host.session() as s:
        assert s.on_plain_text("x").value == "x"


def test_before_after_constraints_and_cycles(built: Built, tmp_path: Path) -> None:
    host = kit_host(built, [("a", 90, "append", "explicit"), ("b", 10, "append", "explicit")])
    from dataclasses import replace

    lp = host.plugins["b"]
    manifest = replace(lp.plugin.module.__dict__.get("manifest") or _manifest("b"),
                       before=("a",))
    lp.manifest = manifest
    host._order_cache.clear()
    with host.session() as s:
        assert s.on_plain_text("x").value == "x[b][a]"
    host.plugins["a"].manifest = replace(_manifest("a"), before=("b",))
    host._order_cache.clear()
    with pytest.raises(ConfigError, match="cycle among: a, b"):
        host.ordered("on_plain_text")


def _manifest(pid: str):  # type: ignore[no-untyped-def]
    from wasmext.manifest import parse_manifest

    return parse_manifest({"id": pid, "version": "1.0.0"}, Path("plugin.toml"))


spec_strategy = st.lists(
    st.tuples(st.integers(0, 100), st.sampled_from(MODES),
              st.sampled_from(["user", "explicit", "workspace"])),
    min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=spec_strategy, text=st.text(max_size=20))
def test_random_plugin_sets_follow_the_model(built: Built, raw: list[tuple[int, str, str]],
                                             text: str) -> None:
    specs = [(f"p{i}", prio, mode, src) for i, (prio, mode, src) in enumerate(raw)]
    host = kit_host(built, specs)
    try:
        with host.session() as s:
            result = s.on_plain_text(text)
        value, changed, stopped = model(specs, text)
        assert result.value == value
        assert result.changed_by == changed
        assert result.stopped_by == stopped
        assert result.original == text
    finally:
        host.close()


def test_a_fail_closed_abort_names_the_plugin_once_and_the_cause(built: Built) -> None:
    """`wasmext run` printed "plugin b hook on_plain_text: aborted: plugin b failed in
    on_plain_text and is fail-closed: <reason>", without what went wrong."""
    host = kit_host(built, [("b", 80, "fail", "explicit")], failure={"b": "closed"})
    with host.session() as s, pytest.raises(HookAborted) as info:
        s.on_plain_text("x")
    cause = info.value.cause
    assert cause is not None
    line = info.value.describe()
    assert line.startswith("plugin b hook on_plain_text: aborted, the plugin is fail-closed: ")
    assert line.endswith(cause.message) and line.count("plugin b") == 1
    assert str(info.value).startswith("plugin b failed in on_plain_text")  # still says who
