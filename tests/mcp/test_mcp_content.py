"""The MessagePack shape of MCP content blocks (wasmext.mcp.content), both ways."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from interop_support import TIMEOUT, run, tool_wat
from mcp.client.client import Client

from wasmext import HostConfig
from wasmext.mcp.content import MAX_BLOCKS, content_shape, from_mcp, to_mcp
from wasmext.mcp.server.serve import McpToolServer
from wasmext.testing import guest_wat, make_host

SAFE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789:/._-", min_size=1, max_size=40)
MIME = st.sampled_from(["image/png", "audio/wav", "text/plain", "application/octet-stream"])
BLOCK = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=200)}),
    st.fixed_dictionaries({"type": st.sampled_from(["image", "audio"]),
                           "data": st.binary(max_size=200), "mime_type": MIME}),
    st.fixed_dictionaries({"type": st.just("resource_link"), "uri": SAFE, "name": SAFE},
                          optional={"mime_type": MIME, "description": SAFE, "title": SAFE}),
    st.fixed_dictionaries({"type": st.just("resource"), "uri": SAFE,
                           "text": st.text(max_size=100)}, optional={"mime_type": MIME}),
    st.fixed_dictionaries({"type": st.just("resource"), "uri": SAFE,
                           "blob": st.binary(max_size=100)}, optional={"mime_type": MIME}),
)


@given(st.lists(BLOCK, max_size=8))
def test_blocks_round_trip(blocks: list[dict[str, Any]]) -> None:
    assert from_mcp(to_mcp(blocks)) == blocks
    assert content_shape({"content": blocks})


JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20)
                    | st.binary(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.sampled_from(["type", "text", "data", "uri", "name",
                                                       "mime_type", "blob", "x"]) | st.text(),
                                      inner, max_size=5), max_leaves=20)


@given(st.lists(JUNK, max_size=5))
def test_hostile_blocks_raise_only_value_error(blocks: list[Any]) -> None:
    try:
        converted = to_mcp(blocks)
    except ValueError as exc:
        message = str(exc)
    else:
        assert len(converted) == len(blocks)
        return
    assert "content[" in message


def test_plugin_content_served_as_mcp_blocks(tmp_path: Path) -> None:
    blocks = [{"type": "text", "text": "a picture"},
              {"type": "image", "data": b"\x89PNG\r\n\x1a\n", "mime_type": "image/png"},
              {"type": "audio", "data": b"RIFF", "mime_type": "audio/wav"},
              {"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
              {"type": "resource", "uri": "mem://x", "blob": b"\x00\x01"}]
    pic = tool_wat([{"name": "pic"}], value={"content": blocks})
    too_many = tool_wat([{"name": "flood"}], value={
        "content": [{"type": "text", "text": "x"}] * (MAX_BLOCKS + 1)})
    forged = tool_wat([{"name": "forged"}], value={
        "content": [{"type": "image", "data": "not-bytes\x1b[31m", "mime_type": "x"}]})
    fine = tool_wat([{"name": "ok"}])
    config = HostConfig(data_dir=tmp_path / ".wasmext")
    with make_host((pic, {"plugin_id": "pic"}), (too_many, {"plugin_id": "flood"}),
                   (forged, {"plugin_id": "forged"}), (fine, {"plugin_id": "fine"}),
                   config=config) as host:
        server = McpToolServer(host, poll_interval=0)

        async def main() -> None:
            async with Client(server.server, read_timeout_seconds=TIMEOUT) as client:
                result = await client.call_tool("pic__pic", {})
                assert not result.is_error
                assert [c.type for c in result.content] == [
                    "text", "image", "audio", "resource_link", "resource"]
                image = result.content[1]
                assert isinstance(image, types.ImageContent)
                assert image.data == "iVBORw0KGgo="
                assert from_mcp(result.content) == blocks
                for name, needle in (("flood__flood", "more than"),
                                     ("forged__forged", "must be binary")):
                    started = time.monotonic()
                    bad = await client.call_tool(name, {})
                    assert time.monotonic() - started < TIMEOUT
                    assert bad.is_error
                    text = bad.content[0]
                    assert isinstance(text, types.TextContent)
                    assert text.text.startswith("invalid_output: plugin ")
                    assert needle in text.text and "\x1b" not in text.text
                healthy = await client.call_tool("fine__ok", {})
                assert not healthy.is_error and healthy.structured_content == {"found": 1}

        run(main)


@pytest.mark.parametrize("value", [{"found": "one"}, "a string"])
def test_output_not_matching_output_schema_is_a_tool_error(tmp_path: Path, value: Any) -> None:
    schema = {"type": "object", "properties": {"found": {"type": "integer"}},
              "required": ["found"]}
    wat = tool_wat([{"name": "typed", "output_schema": schema}], value=value)
    with make_host((wat, {"plugin_id": "typed"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host:
        server = McpToolServer(host, poll_interval=0)

        async def main() -> None:
            async with Client(server.server, read_timeout_seconds=TIMEOUT) as client:
                bad = await client.call_tool("typed__typed", {})
                assert bad.is_error and bad.structured_content is None
                text = bad.content[0]
                assert isinstance(text, types.TextContent)
                assert "does not match its output_schema" in text.text

        run(main)


def test_bad_resource_and_prompt_answers_are_errors_naming_the_plugin(tmp_path: Path) -> None:
    from mcp.shared.exceptions import MCPError

    bad = guest_wat(response={"ok": True, "value": {"not": "contents\x1b[2J"}}, registration={
        "hooks": [{"hook": "on_resource"}, {"hook": "on_prompt"}],
        "resources": [{"uri": "bad://x", "name": "x"}, {"uri": "bad://x", "name": "twice"},
                      {"name": "no uri"}, "junk"],
        "prompts": [{"name": "p"}, {"name": "bad name!"}]})
    with make_host((bad, {"plugin_id": "bad"}), (tool_wat([{"name": "ok"}]), {"plugin_id": "ok"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host:
        server = McpToolServer(host, poll_interval=0)

        async def main() -> None:
            async with Client(server.server, read_timeout_seconds=TIMEOUT) as client:
                listed = (await client.list_resources()).resources
                assert [(str(r.uri), r.name) for r in listed] == [("bad://x", "x")]
                assert [p.name for p in (await client.list_prompts()).prompts] == ["bad__p"]
                for action in (client.read_resource("bad://x"),
                               client.get_prompt("bad__p", {})):
                    with pytest.raises(MCPError) as err:
                        await action
                    assert "plugin bad" in err.value.error.message
                    assert "\x1b" not in err.value.error.message
                ok = await client.call_tool("ok__ok", {})
                assert not ok.is_error

        run(main)

