"""`wasmext run --policy` reads the policy again when its file changes during the run:
the model server (a loopback OpenAI-compatible endpoint of this test) rewrites the
policy while it answers the first turn, and the second turn runs under the new one
(plugins/agent-guard as the validator it names)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support import Built

GUARDED = 'policy_id = "guarded"\n[[validators]]\nid = "agent-guard"\non_fail = "block"\n'


def rewrite(policy: Path, text: str) -> None:
    """Write `text` and move the mtime on, so that even a coarse clock sees a change."""
    before = policy.stat().st_mtime_ns
    policy.write_text(text)
    os.utime(policy, ns=(before + 10**9, before + 10**9))


@pytest.fixture
def model(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A chat endpoint that, answering its first request, turns the policy guarded."""
    policy = tmp_path / "policy.toml"
    policy.write_text('policy_id = "open"\n')
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(request["messages"][-1]["content"])
            if len(asked) == 1:
                rewrite(policy, GUARDED)
            body = json.dumps({"id": "c", "object": "chat.completion", "model": "m",
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant",
                                                        "content": "noted"}}],
                               "usage": {"prompt_tokens": 9, "completion_tokens": 1,
                                         "total_tokens": 10}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_policy_edited_during_a_run_applies_to_the_next_turn(
        built: Built, tmp_path: Path, model: tuple[str, list[str]]) -> None:
    url, asked = model
    shutil.copytree(built["agent-guard"], tmp_path / "plugins" / "agent-guard")
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "wasmext_cli", "run", "--config", str(config),
         "--policy", str(tmp_path / "policy.toml"), "--model-url", url, "--model", "m",
         "--prompt", "my password is one", "--prompt", "my password is two", "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    turns = json.loads(proc.stdout)["turns"]
    # The first turn ran under the open policy; the edit made while the model answered
    # it guards the second, which agent-guard refuses before the model is asked.
    assert turns[0]["aborted"] is None and turns[0]["response"] == "noted"
    assert "agent-guard: banned word: password" in turns[1]["aborted"]
    assert asked == ["my password is one"]
