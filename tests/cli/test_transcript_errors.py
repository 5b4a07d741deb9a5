"""A transcript `wasmext run` cannot play is named as one: `transcript:`, the file and the
line, then the field; never `config:`, which is the host's configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from wasmext.errors import ConfigError, TranscriptError
from wasmext.models import Transcript, load_transcript
from wasmext_cli.main import main

TWO_TURNS = """{
  "model": "m",
  "turns": [
    {"user": "hi", "steps": [{"response": "a"}]},
    {"user": "again",
     "steps": [{"response": "x"},
               %s]}
  ]
}
"""


@pytest.mark.parametrize(("text", "line", "says"), [
    ("{\n  \"turns\": [\n", 3, "not JSON: Expecting value"),
    ("[1, 2]\n", 1, "a transcript is a JSON object"),
    ('{"model": "m",\n "turns": []}\n', 2, "turns must be a non-empty array"),
    (TWO_TURNS % '{"response": 3}', 7, "turns[1].steps[1] needs 'response' (str)"),
    (TWO_TURNS % '{"tool_calls": [{"args": {}}]}', 7,
     "turns[1].steps[1].tool_calls[0] needs 'tool' (str)"),
    ('{"turns": [{"user": "u", "steps": [{}]}],\n\n "completions": [1]}', 3,
     "completions must be an array of strings"),
    # A misspelt optional field once played as an empty step (an empty answer, exit 0).
    (TWO_TURNS % '{"responze": "x"}', 7, "turns[1].steps[1] has an unknown field "
     "'responze' (it may have 'response', 'tool_calls')"),
    (TWO_TURNS % '{"tool_calls": [{"tool": "calc", "arg": {}}]}', 7,
     "turns[1].steps[1].tool_calls[0] has an unknown field 'arg' (it may have 'tool', "
     "'args', 'call_id')"),
    ('{"turns": [\n {"user": "u", "steps": []}]}', 2,
     "turns[0] needs 'user' (str) and 'steps' (a non-empty array)"),
])
def test_a_bad_transcript_names_the_file_and_line(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  text: str, line: int, says: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "session.json").write_text(text)
    result = CliRunner().invoke(main, ["run", "session.json"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"wasmext: transcript: session.json:{line}"), lines[0]
    assert says in lines[0] and "config:" not in lines[0]


def test_the_error_is_a_config_error_of_its_own_kind(tmp_path: Path) -> None:
    """Callers catching ConfigError still catch it; without a file it names the field."""
    with pytest.raises(TranscriptError, match=r"^turns\[0\] needs") as raised:
        Transcript({"turns": [{"user": 1}]})
    assert isinstance(raised.value, ConfigError) and raised.value.reason == "transcript"
    path = tmp_path / "dup.json"
    path.write_text('{"turns": 1,\n"turns": [\n {"user": "u", "steps": []}]}')
    with pytest.raises(TranscriptError, match=r"dup\.json:3: turns\[0\] needs"):
        load_transcript(path)  # the key json.loads kept: the last of the two


def test_run_without_a_transcript_shows_the_smallest_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With plugins but no transcript (`wasmext run --plugins ..` beside a first plugin),
    the usage error named a transcript without saying what one is: it shows the
    smallest, and that one plays."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plugins").mkdir()
    result = CliRunner().invoke(main, ["run", "--plugins", "plugins"])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    smallest = '{"turns": [{"user": "hi", "steps": [{"response": "hello"}]}]}'
    assert f"give a TRANSCRIPT to replay (a JSON file, at its smallest {smallest}), or " \
           "--model-url and --prompt" in said, result.stderr
    (tmp_path / "t.json").write_text(smallest)
    played = CliRunner().invoke(main, ["run", "t.json", "--plugins", "plugins"])
    assert played.exit_code == 0 and "answer: hello" in played.stdout, played.output
