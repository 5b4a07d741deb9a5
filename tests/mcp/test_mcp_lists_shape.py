"""Hypothesis: whatever a server lists, the shapes the app and plugins get from
`client_lists` are inert (no control or format characters where a person may see
them), bounded, and never raise; a URI or prompt name is kept exactly or dropped."""

from __future__ import annotations

import mcp_types as types
from hypothesis import given
from hypothesis import strategies as st

from wasmext.mcp.client.catalog import MAX_URI, shape_prompt, shape_resource
from wasmext.text import is_unsafe

ANY_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)
SHOWN = ("name", "title", "description", "mime_type")


def inert(value: str, limit: int) -> bool:
    return len(value) <= limit + 20 and not any(map(is_unsafe, value.replace("\n", "")))


@given(uri=ANY_TEXT, name=ANY_TEXT, description=ANY_TEXT, title=st.none() | ANY_TEXT,
       mime=st.none() | ANY_TEXT)
def test_resources_are_inert_or_dropped(uri: str, name: str, description: str,
                                        title: str | None, mime: str | None) -> None:
    item = types.Resource(uri=uri, name=name, description=description, title=title,
                          mime_type=mime)
    shaped = shape_resource(item)
    if shaped is None:
        assert not uri or len(uri) > MAX_URI or any(map(is_unsafe, uri))
        return
    assert shaped["uri"] == uri
    for key in SHOWN:
        if key in shaped:
            assert inert(shaped[key], 4096 if key == "description" else 128), shaped


@given(name=ANY_TEXT, description=st.none() | ANY_TEXT,
       args=st.lists(st.tuples(ANY_TEXT, st.none() | ANY_TEXT, st.booleans()), max_size=80))
def test_prompts_are_inert_or_dropped(name: str, description: str | None,
                                      args: list[tuple[str, str | None, bool]]) -> None:
    item = types.Prompt(name=name, description=description, arguments=[
        types.PromptArgument(name=a, description=d, required=r) for a, d, r in args])
    shaped = shape_prompt(item)
    if shaped is None:
        assert not name or len(name) > 256 or any(map(is_unsafe, name))
        return
    assert shaped["name"] == name
    assert len(shaped["arguments"]) <= 64
    for arg in shaped["arguments"]:
        assert arg["name"] and inert(arg["name"], 64)
        assert isinstance(arg["required"], bool)
        assert inert(arg.get("description", ""), 512)
    assert inert(shaped.get("description", ""), 4096)
