"""`wasmext run` on the shipped example plugins and transcript fires every hook kind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import Built

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
EVERY_KIND = {
    "on_input_messages", "on_plain_text", "on_llm_output",           # transforms
    "on_tag",                                                          # tags
    "turn", "step", "tool_call",                                       # middleware
    "session_start", "before_model", "before_tool", "after_tool",     # lifecycle
    "validator",                                                       # pipeline stage
    "output_extension",                                                # output extensions
}


def example_config(folder: Path) -> Path:
    """docs/examples/wasmext.toml, with its state in `folder` and absolute plugin paths."""
    config = folder / "wasmext.toml"
    config.write_text((EXAMPLES / "wasmext.toml").read_text()
                      .replace('"../../.wasmext"', f'"{folder / "state"}"')
                      .replace('"../../plugins"', f'"{ROOT / "plugins"}"'))
    return config


# The example config loads every folder of plugins/, two of them Python components
# (json-check, sentiment-py) that only these tests and their own load: about a minute of
# a core to build and compile cold, so everything that runs the whole folder is slow.
RUNS_EVERY_PLUGIN = pytest.mark.slow


@pytest.fixture(scope="module")
def run_doc(built: Built, tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    # The example config loads every folder of plugins/, so each must be built first
    # (not only when another test happened to build it).
    for folder in sorted((ROOT / "plugins").iterdir()):
        if (folder / "plugin.toml").is_file():
            built[folder.name]  # skips with the install command when a toolchain is missing
    data = tmp_path_factory.mktemp("run")
    config = example_config(data)
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "run",
                           str(EXAMPLES / "transcript.json"), "--config", str(config),
                           "--policy", str(EXAMPLES / "policy.toml"), "--json"],
                          # The example folder holds a Python component (json-check): its
                          # first compile on a loaded machine takes minutes.
                          capture_output=True, text=True, timeout=600, cwd=data)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


@RUNS_EVERY_PLUGIN
def test_every_hook_kind_fires(run_doc: dict) -> None:  # type: ignore[type-arg]
    assert run_doc["load_errors"] == []
    missing = EVERY_KIND - set(run_doc["hooks_fired"])
    assert not missing, f"hook kinds that did not fire: {sorted(missing)}"


@RUNS_EVERY_PLUGIN
def test_the_demo_turn_went_through_every_plugin(run_doc: dict) -> None:  # type: ignore[type-arg]
    first, second = run_doc["turns"]
    assert first["aborted"] is None
    tools = {c["tool"]: c["result"] for c in first["tool_calls"]}
    assert tools["calc"]["status"] == "ok" and tools["calc"]["output"] == 42
    assert tools["calc"].get("audited") is True                      # tool_call middleware
    assert tools["shell"]["status"] == "error"                        # before_tool blocked it
    assert "FORTY-TWO" in first["response"]                           # on_tag upper
    assert "[REDACTED]" in first["response"]                          # on_tag redact*
    assert "[PHONE]" in first["response"]                             # pii-mask on_llm_output
    assert "😀" not in first["response"]                              # normalize-text emoji
    assert first["response"].endswith("[audited]")                    # turn middleware
    assert "Never run shell commands." in first["system"]             # prompt addition
    assert "Prefer these tools: calc." in first["system"]             # tool guidance
    names = [e["name"] for e in first["extensions"]]
    assert names == ["wordcount", "shout"]                            # output extensions
    assert first["extensions"][1]["content"]["saw"] == ["wordcount"]  # chaining
    assert second["aborted"] and "banned word" in second["aborted"]   # validator blocked


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ten lines run from any folder: they need only what the package ships (the
    installed-wheel walk runs them again from a wheel in an empty folder)."""
    readme = (ROOT / "README.md").read_text()
    code = readme.split("## Ten lines of Python")[1].split("```python")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    printed: list[str] = []
    exec(compile(code, "README.md", "exec"), {"print": lambda *a: printed.append(
        " ".join(map(str, a)))})
    assert printed[0] == "Mail [EMAIL]"
    assert printed[1] == "say HI"
    assert any("pii-mask" in line and "changed" in line for line in printed[2:])
    from wasmext_cli.example import example_root
    assert not (example_root() / ".wasmext").exists()  # nothing written into the package


@RUNS_EVERY_PLUGIN
def test_embedding_example_runs(run_doc: dict) -> None:  # type: ignore[type-arg]
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "embed_example.py")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "contained: timeout" in proc.stdout
    assert "afterwards: 'card [CARD]'" in proc.stdout


@RUNS_EVERY_PLUGIN
def test_model_url_talks_to_an_openai_compatible_endpoint(run_doc: dict,  # type: ignore[type-arg]
                                                          tmp_path: Path) -> None:
    """A real HTTP server on loopback speaking chat completions: one tool call, then text."""
    import http.server
    import threading

    requests: list[dict] = []  # type: ignore[type-arg]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            if len(requests) == 1:
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "calc", "arguments": '{"expression": "2+3"}'}}]}
            else:
                message = {"role": "assistant", "content": "It is <upper>five</upper>."}
            out = json.dumps({"choices": [{"message": message}],
                              "usage": {"prompt_tokens": 5, "completion_tokens": 3}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "wasmext_cli", "run", "--plugins", str(ROOT / "plugins"),
             "--model-url", f"http://127.0.0.1:{server.server_address[1]}/v1",
             "--model", "test-model", "--prompt", "add 2 and 3", "--json"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    turn = doc["turns"][0]
    assert turn["tool_calls"][0]["result"]["output"] == 5
    assert "FIVE" in turn["response"]
    assert requests[0]["model"] == "test-model"
    assert {t["function"]["name"] for t in requests[0]["tools"]} >= {"calc"}
    assert "debug" not in {t["function"]["name"] for t in requests[0]["tools"]}  # turn-audit
    assert requests[1]["messages"][-1]["role"] == "tool"
    assert requests[1]["messages"][-1]["tool_call_id"] == "c1"
    assert requests[1]["messages"][-2]["tool_calls"][0]["id"] == "c1"


@RUNS_EVERY_PLUGIN
def test_stats_command(run_doc: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    config = example_config(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "stats",
                           str(EXAMPLES / "transcript.json"), "--config", str(config),
                           "--json", "--json-logs"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout)
    assert table["agent-guard"]["calls"] > 0 and table["agent-guard"]["fuel"] > 0
    assert table["turn-audit"]["p99_ms"] >= table["turn-audit"]["p50_ms"]
    # --json-logs: whatever the host logged is one JSON object per line.
    for line in proc.stderr.splitlines():
        assert "plugin_id" in json.loads(line)
