"""The output-extension helpers of the Python and JavaScript guest SDKs, at the
source level (the same cases in both), and the host unwrapping what their result
builders make into a result's content, content type and metadata."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from support import ROOT
from wasmext import Host, Runtime
from wasmext.config import HostConfig
from wasmext.testing import guest_wat

_spec = importlib.util.spec_from_file_location(
    "guest_helpers", ROOT / "guest-sdks" / "python" / "wasmext_guest" / "helpers.py")
assert _spec is not None and _spec.loader is not None
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)

JS = ROOT / "guest-sdks" / "javascript" / "src" / "helpers.js"
NODE = shutil.which("node")

FENCED = 'Sure:\n```json\n{"result": "yes", "n": [1, {"x": "}"}]}\n```\nbye'
CASES: list[tuple[str, Any]] = [
    (FENCED, {"result": "yes", "n": [1, {"x": "}"}]}),
    ('prefix {"a": {"b": [true, null]}} suffix {"c": 2}', {"a": {"b": [True, None]}}),
    ("a list: [1, 2, 3] and more", [1, 2, 3]),
    ("{not json} then {\"ok\": 1}", {"ok": 1}),
    ("no json here", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_python_extract_json_from_text(text: str, expected: Any) -> None:
    assert helpers.extract_json_from_text(text) == expected


def test_python_text_helpers_and_builders() -> None:
    assert helpers.count_words("  one two\tthree\n") == 3 and helpers.count_words(" ") == 0
    assert helpers.extract_sentences("Hi there. How are you? Fine!") == [
        "Hi there.", "How are you?", "Fine!"]
    assert helpers.extract_code_blocks("x\n```py\nprint(1)\n```") == [
        {"language": "py", "code": "print(1)\n"}]
    assert helpers.truncate("alpha beta gamma", 12) == "alpha beta…"
    assert helpers.truncate("short", 12) == "short"
    assert helpers.json_result({"a": 1}, source="regex") == {"extension_result": {
        "content": {"a": 1}, "content_type": "application/json",
        "metadata": {"source": "regex"}}}
    assert helpers.text_result("hi")["extension_result"]["content_type"] == "text/plain"
    assert json.loads(helpers.safe_json_dumps({"t": time})) == {"t": str(time)}


def test_python_extract_is_bounded_on_hostile_text() -> None:
    started = time.monotonic()
    assert helpers.extract_json_from_text("{" * 200_000 + "[" * 200_000) is None
    assert helpers.extract_json_from_text("[{" * 100_000) is None
    assert time.monotonic() - started < 3


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_javascript_helpers_match(tmp_path: Path) -> None:
    script = tmp_path / "check.mjs"
    script.write_text(f"""
import * as h from "{JS}";
const cases = {json.dumps([c[0] for c in CASES])};
const started = Date.now();
const hostile = h.extractJsonFromText("{{".repeat(200000) + "[".repeat(200000));
console.log(JSON.stringify({{
  extracted: cases.map((c) => h.extractJsonFromText(c)),
  words: [h.countWords("  one two\\tthree\\n"), h.countWords(" ")],
  sentences: h.extractSentences("Hi there. How are you? Fine!"),
  blocks: h.extractCodeBlocks("x\\n```py\\nprint(1)\\n```"),
  cut: [h.truncate("alpha beta gamma", 12), h.truncate("short", 12)],
  built: [h.jsonResult({{a: 1}}, {{source: "regex"}}), h.textResult("hi")],
  hostile, hostileMs: Date.now() - started,
}}));
""")
    assert NODE is not None
    proc = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["extracted"] == [c[1] for c in CASES]
    assert out["words"] == [3, 0]
    assert out["sentences"] == ["Hi there.", "How are you?", "Fine!"]
    assert out["blocks"] == [{"language": "py", "code": "print(1)\n"}]
    assert out["cut"] == ["alpha beta…", "short"]
    assert out["built"] == [helpers.json_result({"a": 1}, source="regex"),
                            helpers.text_result("hi")]
    assert out["hostile"] is None and out["hostileMs"] < 3000


def _answering(value: Any) -> bytes:
    reg = {"hooks": [{"hook": "output_extension", "pattern": "built"}]}
    return bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": value},
                                             registration=reg)))


@pytest.mark.parametrize(("value", "content", "content_type", "plugin_meta"), [
    (helpers.json_result({"a": 1}, source="regex"), {"a": 1}, "application/json",
     {"source": "regex"}),
    (helpers.text_result("hello"), "hello", "text/plain", None),
    # not exactly the envelope: the value is the content, as it came
    ({"extension_result": {"content": 1}, "other": 2},
     {"extension_result": {"content": 1}, "other": 2}, "application/json", None),
    ({"extension_result": {"content": 1, "content_type": "\x1b[31mred\x1b[0m" * 40}}, 1,
     None, None),
])
def test_the_host_unwraps_built_results(value: Any, content: Any, content_type: str | None,
                                        plugin_meta: Any) -> None:
    with Host(HostConfig(state_backend="memory"), runtime=Runtime(cache=False),
              plugin_dirs=[]) as host:
        host.add(_answering(value), plugin_id="builder")
        with host.session() as s:
            _, (r,) = s.output_extensions("#built", "answer")
    assert r.success and r.content == content
    if content_type is None:  # a hostile type: cleaned and cut, one inert line
        assert "\x1b" not in r.content_type and len(r.content_type) <= 128
    else:
        assert r.content_type == content_type
    assert r.metadata.get("plugin") == plugin_meta
    assert r.metadata["activation"] == "built"
