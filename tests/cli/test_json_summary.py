"""The example output extension #summary (plugins/json-summary) end to end in
`wasmext run`: against a replayed transcript's model and against --model-url
(a loopback OpenAI-compatible server), with its llm grant, tokens and cost."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from loopback import loopback
from support import Built
from wasmext import Runtime

ROOT = Path(__file__).resolve().parents[2]


def setup(built: Built, tmp_path: Path, model: str) -> Path:
    """A plugins folder with json-summary and a config granting it `llm`."""
    shutil.copytree(built["json-summary"], tmp_path / "plugins" / "json-summary")
    with Runtime(cache=False) as rt:
        digest = rt.load(tmp_path / "plugins" / "json-summary").module.info.digest
    config = tmp_path / "wasmext.toml"
    config.write_text(f"""
[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
[grants.json-summary]
digest = "sha256:{digest}"
capabilities = ["llm"]
[plugin.json-summary]
limits = {{ timeout_ms = 10000 }}
[llm.prices.{model}]
input = 1.0
output = 2.0
""")
    return config


def run(*args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "run", *args, "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_summary_against_the_transcripts_model(built: Built, tmp_path: Path) -> None:
    config = setup(built, tmp_path, "demo-model")
    doc = run("docs/examples/summary-transcript.json", "--config", str(config))
    (ext,) = doc["turns"][0]["extensions"]
    assert ext["success"] and ext["plugin"] == "json-summary"
    assert json.loads(ext["content"]["summary"]) == {"summary": "Paris is the capital of France."}
    assert ext["content_type"] == "application/json"
    assert ext["usage"] == ext["content"]["usage"] and ext["usage"]["output"] == 7
    assert ext["cost"] == ext["content"]["cost"] == (ext["usage"]["input"] + 2 * 7) / 1e6
    assert {"hook": "output_extension", "plugin": "json-summary", "outcome": "changed",
            "detail": None} in doc["trace"]


def test_summary_against_a_model_url(built: Built, tmp_path: Path) -> None:
    config = setup(built, tmp_path, "test-model")
    with loopback() as server:
        server.server.completion["text"] = '{"summary": "hello"}'
        doc = run("--config", str(config), "--model-url", server.url("/v1"),
                  "--model", "test-model", "--prompt", "Say hello. #summary:long")
        asked = [json.loads(s["body"]) for s in server.seen]
    (ext,) = doc["turns"][0]["extensions"]
    assert ext["success"] and json.loads(ext["content"]["summary"]) == {"summary": "hello"}
    assert ext["usage"] == {"input": 12, "output": 5}
    assert ext["cost"] == (12 + 2 * 5) / 1e6
    # the turn itself and then the extension's llm.complete, both to the same model
    assert [a["model"] for a in asked] == ["test-model", "test-model"]
    assert "in a few sentences" in asked[1]["messages"][-1]["content"]


def test_stats_reports_the_tokens_and_cost(built: Built, tmp_path: Path) -> None:
    config = setup(built, tmp_path, "demo-model")
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "stats",
                           "docs/examples/summary-transcript.json", "--config", str(config),
                           "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)["json-summary"]
    assert row["llm_tokens"] > 7 and row["llm_cost"] == (row["llm_tokens"] + 7) / 1e6


def test_a_param_outside_allowed_params_is_an_error_result(built: Built,
                                                           tmp_path: Path) -> None:
    config = setup(built, tmp_path, "demo-model")
    transcript = json.loads((ROOT / "docs/examples/summary-transcript.json").read_text())
    transcript["turns"][0]["user"] = "Capital of France? #summary:everything"
    path = tmp_path / "t.json"
    path.write_text(json.dumps(transcript))
    (ext,) = run(str(path), "--config", str(config))["turns"][0]["extensions"]
    assert not ext["success"] and "not allowed" in ext["error"]
