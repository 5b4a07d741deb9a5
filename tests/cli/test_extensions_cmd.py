"""`wasmext extensions` and `wasmext run --user/--session` with the text-tags plugin:
users' activations from the command line, a run per user, the saved turns shown
again for a session, user copies of a plugin, and the operator's switch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from support import Built
from wasmext_cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def setup(built: Built, tmp_path: Path, user_extensions: bool = True) -> Path:
    shutil.copytree(built["text-tags"], tmp_path / "plugins" / "text-tags")
    (tmp_path / "transcript.json").write_text(json.dumps({
        "model": "demo-model", "system": "s", "turns": [
            {"user": "count #wordcount #wordcount2 #shout", "steps": [{"response": "a b c"}]},
            {"user": "again #wordcount:full", "steps": [{"response": "d e"}]}]}))
    config = tmp_path / "wasmext.toml"
    config.write_text(f"""
[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
user_dir = "user-plugins"
user_extensions = {str(user_extensions).lower()}
""")
    return config


def cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """The command in this process (click's runner); `run` in its own, as users run it."""
    if args[0] == "run":
        proc = subprocess.run([sys.executable, "-m", "wasmext_cli", *args],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    else:
        result = CliRunner().invoke(main, list(args))
        proc = subprocess.CompletedProcess(args, result.exit_code, result.stdout,
                                           result.stderr)
    assert (proc.returncode == 0) == ok, proc.stderr
    return proc


def as_json(*args: str) -> Any:
    return json.loads(cli(*args, "--json").stdout)


def test_activations_runs_and_history_from_the_command_line(built: Built,
                                                            tmp_path: Path) -> None:
    config = str(setup(built, tmp_path))
    served = as_json("extensions", "list", "--config", config)
    assert [(r["name"], r["plugin"]) for r in served] == [("wordcount", "text-tags"),
                                                         ("shout", "text-tags")]
    first = as_json("extensions", "activate", "wordcount", "--user", "alice", "--param",
                    "brief", "--config", config)
    assert (first["name"], first["default_param"]) == ("wordcount", "brief")
    cli("extensions", "activate", "wordcount", "--user", "alice", "--config", config)
    cli("extensions", "activate", "shout", "--user", "bob", "--config", config)
    listed = as_json("extensions", "list", "--user", "alice", "--config", config)
    assert [(a["name"], a["extension"]) for a in listed] == [("wordcount", "wordcount"),
                                                            ("wordcount2", "wordcount")]
    refused = cli("extensions", "activate", "nosuch", "--user", "alice", "--config", config,
                  ok=False)
    assert refused.returncode == 2 and "no loaded plugin serves" in refused.stderr

    transcript = str(tmp_path / "transcript.json")
    alice = as_json("run", transcript, "--config", config, "--user", "alice",
                    "--session", "chat-1")
    turn = alice["turns"][0]["extensions"]
    assert [(e["name"], e["param"], e["success"]) for e in turn] == [
        ("wordcount", "brief", True), ("wordcount2", None, True), ("shout", None, False)]
    assert turn[0]["content"] == 3
    bob = as_json("run", transcript, "--config", config, "--user", "bob", "--session", "chat-2")
    assert [(e["name"], e["success"]) for e in bob["turns"][0]["extensions"]] == [
        ("wordcount", False), ("wordcount2", False), ("shout", True)]

    # the session's turns are shown again, after the process that ran them has gone
    history = as_json("extensions", "history", "--session", "chat-1", "--config", config)
    assert [t["turn_id"] for t in history] == ["turn-0", "turn-1"]
    assert history[0]["results"] == turn
    assert history[1]["results"][0]["content"]["words"] == 2
    text = cli("extensions", "history", "--session", "chat-1", "--config", config).stdout
    assert "turn-0: count #wordcount #wordcount2 #shout" in text and "#shout [failed" in text
    # resuming the session with `run --session` shows the earlier turns' results first
    assert alice["earlier_extensions"] == []
    resumed = as_json("run", transcript, "--config", config, "--user", "alice",
                      "--session", "chat-1")
    assert resumed["earlier_extensions"] == history
    text = cli("run", transcript, "--config", config, "--user", "alice", "--session",
               "chat-1").stdout
    assert "earlier turn-0: count #wordcount #wordcount2 #shout" in text
    assert len(as_json("extensions", "history", "--session", "chat-1", "--config",
                       config)) == 6  # three runs of two turns, none overwritten

    cli("extensions", "param", "wordcount2", "full", "--user", "alice", "--config", config)
    cli("extensions", "deactivate", "wordcount", "--user", "alice", "--config", config)
    listed = as_json("extensions", "list", "--user", "alice", "--all", "--config", config)
    assert [(a["name"], a["default_param"], a["active"]) for a in listed] == [
        ("wordcount", "brief", False), ("wordcount2", "full", True)]
    cli("extensions", "remove", "wordcount", "--user", "alice", "--config", config)
    assert cli("extensions", "remove", "wordcount", "--user", "alice", "--config", config,
               ok=False).returncode == 2


def test_a_user_copy_is_loaded_before_the_original(built: Built, tmp_path: Path) -> None:
    config = str(setup(built, tmp_path))
    out = cli("extensions", "copy", "wordcount", "--config", config).stdout
    copy = tmp_path / "user-plugins" / "text-tags-copy"
    assert "text-tags-copy" in out and (copy / "plugin.toml").is_file()
    assert 'id = "text-tags-copy"' in (copy / "plugin.toml").read_text()
    assert (copy / "text-tags-copy.wasm").read_bytes() == \
        (tmp_path / "plugins" / "text-tags" / "text-tags.wasm").read_bytes()
    assert not [p for p in (tmp_path / "user-plugins").iterdir() if p.name.startswith(".")]
    cli("extensions", "copy", "text-tags", "--config", config)  # by plugin id: -copy-2
    assert (tmp_path / "user-plugins" / "text-tags-copy-2").is_dir()
    taken = cli("extensions", "copy", "shout", "--as", "text-tags-copy", "--config", config,
                ok=False)
    assert "already exists" in taken.stderr
    doc = as_json("run", str(tmp_path / "transcript.json"), "--config", config)
    assert doc["turns"][1]["extensions"][0]["plugin"] == "text-tags-copy"


def test_the_operator_switch_turns_user_extensions_off(built: Built, tmp_path: Path) -> None:
    config = str(setup(built, tmp_path, user_extensions=True))
    cli("extensions", "copy", "wordcount", "--config", config)
    off = str(setup_off(tmp_path))
    refused = cli("extensions", "copy", "wordcount", "--config", off, ok=False)
    assert refused.returncode == 2 and "switched off by the operator" in refused.stderr
    assert sorted(p.name for p in (tmp_path / "user-plugins").iterdir()) == ["text-tags-copy"]
    doc = as_json("run", str(tmp_path / "transcript.json"), "--config", off)
    assert doc["plugins"] == ["text-tags"]  # the user folder is not loaded
    assert doc["turns"][1]["extensions"][0]["plugin"] == "text-tags"


def setup_off(tmp_path: Path) -> Path:
    config = tmp_path / "wasmext-off.toml"
    config.write_text((tmp_path / "wasmext.toml").read_text()
                      .replace("user_extensions = true", "user_extensions = false"))
    return config
