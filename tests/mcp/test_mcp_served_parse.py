"""The parsers behind served resources and prompts, and the [mcp.servers] fields added
for interop (headers, roots, sampling), under Hypothesis."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext import ConfigError
from wasmext.mcp.config import parse_mcp
from wasmext.mcp.server.catalog import (
    MAX_ENTRIES,
    catalog,
    match_template,
    prompt_result,
    resource_contents,
)

JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=30)
                    | st.binary(max_size=10),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.sampled_from(["uri", "name", "uri_template",
                                                       "description", "mime_type",
                                                       "arguments", "required", "x"]),
                                      inner, max_size=5), max_leaves=25)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def plugin(extra: dict[str, Any]) -> Any:
    return SimpleNamespace(plugin=SimpleNamespace(registration=SimpleNamespace(extra=extra)))


@given(st.dictionaries(st.sampled_from(["resources", "resource_templates", "prompts"]),
                       JUNK, max_size=3))
def test_catalog_of_hostile_registrations_is_clean(extra: dict[str, Any]) -> None:
    cat = catalog({"p": plugin(extra)})
    for uri, (pid, resource) in cat.resources.items():
        assert pid == "p" and uri == resource.uri and not CONTROL.search(uri)
        assert not CONTROL.search(resource.name)
    for _pid, template in cat.templates:
        assert not CONTROL.search(template.uri_template)
    for served, (_pid, short, prompt) in cat.prompts.items():
        assert served == f"p__{short}" == prompt.name


SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12)


@given(SEGMENT, SEGMENT, st.text(max_size=30))
def test_templates_match_their_expansions_only(prefix: str, value: str, other: str) -> None:
    template = f"notes://{prefix}/{{date}}"
    assert match_template(template, f"notes://{prefix}/{value}")
    assert not match_template(template, f"notes://{prefix}/{value}/more")
    match_template(other, other)  # any text as a template: no exception


@given(JUNK)
def test_plugin_answers_parse_or_name_the_plugin(value: Any) -> None:
    for parse in (lambda: resource_contents("p", "x://y", value),
                  lambda: prompt_result("p", value)):
        try:
            parse()
        except ValueError as exc:
            assert str(exc).startswith("plugin p")  # noqa: PT017


@given(st.dictionaries(st.sampled_from(["headers", "roots", "sampling", "url", "transport"]),
                       JUNK, max_size=4))
def test_server_fields_parse_or_raise_config_error(spec: dict[str, Any]) -> None:
    try:
        parse_mcp({"servers": {"s": spec}}, Path("wasmext.toml"))
    except ConfigError as err:
        assert "wasmext.toml" in err.message  # noqa: PT017


def test_server_fields() -> None:
    _, (server,) = parse_mcp({"servers": {"s": {
        "transport": "http", "url": "http://127.0.0.1:1/mcp",
        "headers": {"X-Key": "k"}, "roots": ["file:///data"], "sampling": True}}}, None)
    assert (dict(server.headers), server.roots, server.sampling) == (
        {"X-Key": "k"}, ("file:///data",), True)
    with pytest.raises(ConfigError, match="roots"):
        parse_mcp({"servers": {"s": {"command": "x", "roots": ["/not/a/uri"]}}}, None)
    with pytest.raises(ConfigError, match="only sse and http"):
        parse_mcp({"servers": {"s": {"command": "x", "headers": {"A": "b"}}}}, None)
    with pytest.raises(ConfigError, match="unknown field"):
        parse_mcp({"servers": {"s": {"command": "x", "cwd": "/"}}}, None)


def test_a_resource_flood_is_cut_to_the_bound(caplog: pytest.LogCaptureFixture) -> None:
    flood = plugin({"resources": [{"uri": f"flood://{i}", "name": f"r{i}"}
                                  for i in range(100_000)],
                    "prompts": [{"name": f"p{i}"} for i in range(100_000)]})
    healthy = plugin({"resources": [{"uri": "ok://1", "name": "one"}]})
    started = time.monotonic()
    cat = catalog({"flood": flood, "ok": healthy})
    assert time.monotonic() - started < 10
    assert len([u for u in cat.resources if u.startswith("flood://")]) == MAX_ENTRIES
    assert len(cat.prompts) == MAX_ENTRIES
    assert cat.resources["ok://1"][0] == "ok"  # the other plugin is served as ever
    assert any("plugin flood: 'resources': only the first" in r.getMessage()
               for r in caplog.records)
