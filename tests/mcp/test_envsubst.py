"""${VAR} substitution: a property test against a plain model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wasmext.mcp.envsubst import substitute

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
plain = st.text(alphabet=st.characters(blacklist_characters="$"), max_size=10)


@given(st.lists(st.tuples(plain, names), max_size=5), plain,
       st.dictionaries(names, st.text(max_size=6), max_size=5))
def test_substitution_matches_the_model(parts: list[tuple[str, str]], tail: str,
                                        env: dict[str, str]) -> None:
    text = "".join(f"{p}${{{n}}}" for p, n in parts) + tail
    expected = "".join(p + env.get(n, "") for p, n in parts) + tail
    out, missing = substitute(text, env)
    assert out == expected
    assert missing == [n for _, n in parts if n not in env]


@given(st.text(alphabet=st.characters(blacklist_characters="$"), max_size=40))
def test_text_without_dollars_is_unchanged(text: str) -> None:
    assert substitute(text, {"A": "x"}) == (text, [])


def test_escape_and_lone_dollars() -> None:
    assert substitute("$${HOME} $HOME ${", {"HOME": "/h"}) == ("${HOME} $HOME ${", [])
