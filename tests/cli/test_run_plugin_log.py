"""`wasmext run --log` shows the plugins' log lines, as `call --log` does (one shared
printer), and every plugin line written during a hook call carries that call's session
and hook: in the JSON log lines of `--json-logs`, and for any handler of the library's."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime
from click.testing import CliRunner

from wasmext.observe.logs import json_handler
from wasmext.testing import DATA_AT, guest_wat, make_host
from wasmext_cli.main import main

LOG = '(import "wasmext" "log" (func $log (param i32 i32 i32)))'
SAID, CAREFUL, NOTE = b"said hello", b"careful now", b"tracing"
TRANSCRIPT = {"turns": [{"user": "hi", "steps": [{"response": "hello"}]}]}


def talker() -> bytes:
    """A plugin whose on_plain_text logs one info, one warn and one trace line."""
    lines = [(2, SAID), (3, CAREFUL), (0, NOTE)]
    body, at = "", DATA_AT
    for level, text in lines:
        body += f"(call $log (i32.const {level}) (i32.const {at}) (i32.const {len(text)}))"
        at += len(text)
    return bytes(wasmtime.wat2wasm(guest_wat(
        body + "(i64.const 0)", imports=LOG, data=b"".join(t for _, t in lines),
        registration={"hooks": [{"hook": "on_plain_text"}], "name": "talker"})))


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "plugins" / "talker"
    folder.mkdir(parents=True)
    (folder / "talker.wasm").write_bytes(talker())
    (folder / "plugin.toml").write_text('id = "talker"\nversion = "0.1.0"\n')
    (tmp_path / "t.json").write_text(json.dumps(TRANSCRIPT))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path


def run(*extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["run", "t.json", "--plugins", "plugins", "--json",
                                       *extra])
    return result.exit_code, result.stdout, result.stderr


def test_run_log_prints_the_plugins_lines_as_call_log_does(workspace: Path) -> None:
    code, out, err = run("--log")
    assert code == 0, err
    assert json.loads(out)["plugins"] == ["talker"]  # the run's own output is unchanged
    assert err.splitlines() == ["[info] talker: said hello", "[warn] talker: careful now",
                                "[trace] talker: tracing"]
    code, _, err = run()
    assert code == 0 and "said hello" not in err  # only when asked for
    called = CliRunner().invoke(main, ["call", "plugins/talker", "on_plain_text",
                                       "--data", '"x"', "--log"])
    assert called.exit_code == 0, called.output
    assert called.stderr.splitlines() == ["[info] said hello", "[warn] careful now",
                                          "[trace] tracing"]


def json_lines(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines()]


def test_json_log_lines_of_a_hook_call_name_its_session_and_hook(workspace: Path) -> None:
    handlers = list(logging.getLogger("wasmext").handlers)
    code, out, err = run("--json-logs", "--log")
    assert code == 0, err
    session = json.loads(out)["session"]
    mine = [doc for doc in json_lines(err) if doc["plugin_id"] == "talker"]
    assert [(d["level"], d["msg"]) for d in mine] == [
        ("info", "said hello"), ("warning", "careful now"), ("trace", "tracing")]
    for doc in mine:
        assert (doc["session"], doc["hook"], doc["source"]) == \
            (session, "on_plain_text", "log"), doc
    # Without --log only a plugin's warnings are log lines, with the same context.
    code, out, err = run("--json-logs")
    assert code == 0, err
    mine = [doc for doc in json_lines(err) if doc["plugin_id"] == "talker"]
    assert [(d["msg"], d["session"], d["hook"]) for d in mine] == [
        ("careful now", json.loads(out)["session"], "on_plain_text")]
    # The command's handler and level went with it (an in-process caller runs more).
    assert logging.getLogger("wasmext").handlers == handlers
    assert logging.getLogger("wasmext.sandbox.plugin").level == logging.NOTSET


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = json_handler(stream)
    logger = logging.getLogger("wasmext.sandbox.plugin")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(5)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_a_hosts_plugin_lines_carry_the_calls_session_and_hook(
        captured: io.StringIO) -> None:
    """The library's own records (any handler, not only the CLI's): a line written in a
    session's hook call names both; one written by a call outside any session names the
    hook and a null session."""
    with make_host((talker(), {"plugin_id": "talker"})) as host:
        with host.session("chat-1") as session:
            session.on_plain_text("hi")
        host.plugins["talker"].plugin.call("on_plain_text", "x")
    docs = json_lines(captured.getvalue())
    assert [(d["plugin_id"], d["session"], d["hook"]) for d in docs] == \
        [("talker", "chat-1", "on_plain_text")] * 3 + [("talker", None, "on_plain_text")] * 3
