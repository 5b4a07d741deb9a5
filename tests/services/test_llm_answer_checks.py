"""The cheap paths of reading an answer keep their bounds: the bracket count that skips
the depth walk never lets a document nested past the cap through, and the ledger's day
(formatted once per UTC day) is the day's date and changes at midnight."""

from __future__ import annotations

import time

import pytest

from wasmext.services.llm import service
from wasmext.services.llm.client import MAX_ANSWER_DEPTH, loads_answer


def _nested(depth: int) -> str:
    return "[" * depth + '"x"' + "]" * depth


@pytest.mark.parametrize("as_bytes", [True, False])
def test_a_document_at_the_cap_loads_and_one_past_it_is_refused(as_bytes: bool) -> None:
    def raw(depth: int) -> bytes | str:
        text = _nested(depth)
        return text.encode() if as_bytes else text

    assert loads_answer(raw(MAX_ANSWER_DEPTH)) is not None
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_ANSWER_DEPTH}"):
        loads_answer(raw(MAX_ANSWER_DEPTH + 1))


def test_brackets_inside_strings_only_make_the_check_walk_the_document() -> None:
    # Many brackets in a string, no real nesting: counted, walked, accepted.
    doc = loads_answer(b'{"content": "' + b"[{" * 100 + b'"}')
    assert doc == {"content": "[{" * 100}


def test_the_ledger_day_is_todays_utc_date_and_follows_midnight(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert service._utc_day() == time.strftime("%Y-%m-%d", time.gmtime())
    midnight = (int(time.time() // 86400) + 1) * 86400
    monkeypatch.setattr(service.time, "time", lambda: midnight - 0.5)
    before = service._utc_day()
    monkeypatch.setattr(service.time, "time", lambda: midnight + 0.5)
    after = service._utc_day()
    assert before == time.strftime("%Y-%m-%d", time.gmtime(midnight - 1))
    assert after == time.strftime("%Y-%m-%d", time.gmtime(midnight))
    assert before != after
