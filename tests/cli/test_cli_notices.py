"""The library's operator notices reach the terminal of `wasmext run`, `stats`, `list` and
`call`: a setting's environment variable the operator did not allow, and a plugin denied
an op, one `wasmext: ` line each naming the plugin and how to grant what it lacked."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import msgpack
import pytest
import wasmtime
from click.testing import CliRunner

from wasmext import runtime
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, guest_wat, make_host
from wasmext_cli.main import main

VARIABLE = "WX_NOTICE_GREETING"


def _nosy(tmp_path: Path) -> Path:
    """A plugin whose on_plain_text asks for state it was not granted, and whose setting
    names an environment variable no operator allowed."""
    raw = msgpack.packb({"op": "state.get", "key": "k"})
    body = f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)})))" \
           " (i64.const 0)"
    folder = tmp_path / "plugins" / "nosy"
    folder.mkdir(parents=True)
    (folder / "nosy.wasm").write_bytes(wasmtime.wat2wasm(guest_wat(
        body, imports=HOST_CALL_IMPORT, data=raw, hooks=("on_plain_text",))))
    (folder / "plugin.toml").write_text(
        f'id = "nosy"\nversion = "1.0.0"\n[settings.greeting]\ndefault = "hi"\n'
        f'env = "{VARIABLE}"\n')
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    (tmp_path / "t.json").write_text(json.dumps(
        {"model": "m", "turns": [{"user": "hi", "steps": [{"response": "ok"}]}]}))
    return folder


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _nosy(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(VARIABLE, "from the environment")
    # Each refusal is said once per process; every command here is a process of its own.
    monkeypatch.setattr(runtime, "_refused_env", set())
    return tmp_path


def _notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("wasmext: plugin nosy")]


@pytest.mark.parametrize("command", ["run", "stats"])
def test_a_session_command_names_the_refused_variable_and_the_missing_grant(
        project: Path, command: str) -> None:
    result = CliRunner().invoke(main, [command, "t.json"])
    assert result.exit_code == 0, result.output
    env, denial = _notices(result.stderr)
    assert f"environment variable {VARIABLE} is not one the operator allowed" in env
    assert "[plugin.nosy] env" in env and "from the environment" not in result.stderr
    assert denial.startswith("wasmext: plugin nosy was denied state.get in session ")
    assert denial.endswith("not granted 'state' (later denials of state.get in this session "
                           "are not reported); to allow it: wasmext grant nosy state")


def test_json_logs_carry_the_notices_once(project: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Both notices as JSON lines, the load-time one too (the JSON handler once came after
    the plugins had loaded), and no plain line beside them."""
    monkeypatch.setattr(logging.getLogger("wasmext"), "handlers", [])  # this run's only
    result = CliRunner().invoke(main, ["run", "t.json", "--json-logs"])
    assert result.exit_code == 0, result.output
    assert _notices(result.stderr) == []
    records = [json.loads(line) for line in result.stderr.splitlines()
               if line.startswith("{")]
    assert [r["op"] for r in records if r.get("op")] == ["state.get"]
    assert [VARIABLE in r["msg"] for r in records if r["logger"] == "wasmext.env"] == [True]


def test_list_names_the_refused_variable(project: Path) -> None:
    result = CliRunner().invoke(main, ["list", "--settings"])
    assert result.exit_code == 0, result.output
    assert [VARIABLE in line for line in _notices(result.stderr)] == [True]
    assert 'nosy.greeting = "hi" (default)' in result.stdout


def test_call_names_the_flag_that_grants_what_was_denied(project: Path) -> None:
    result = CliRunner().invoke(main, ["call", "plugins/nosy", "on_plain_text",
                                       "--data", '"x"'])
    assert result.exit_code == 0, result.output
    denial = [line for line in _notices(result.stderr) if "denied" in line]
    assert denial == ["wasmext: plugin nosy was denied state.get in session wasmext-call: "
                      "plugin nosy was not granted 'state' (later denials of state.get in "
                      "this session are not reported); to allow it: --grant state"]
    granted = CliRunner().invoke(main, ["call", "plugins/nosy", "on_plain_text",
                                        "--data", '"x"', "--grant", "state"])
    assert granted.exit_code == 0 and "denied" not in granted.stderr


# --- what the config names and the host did not find ------------------------------------

TYPOS = """[host]
data_dir = "data"
[plugins]
workspace_dir = "nope"
enabled = ["phantom", "nosy"]
[extensions]
directories = ["plugins"]
[plugin.ghost]
settings = { greeting = "hi" }
[plugin.nosy]
settings = { greeting = "hi" }
"""
UNMET = ["plugin folder nope does not exist",
         "[plugin.ghost] names no plugin found in the plugin folders",
         "[plugins] enabled names phantom, no plugin found in the plugin folders"]


def test_run_names_a_missing_folder_and_ids_no_folder_holds(project: Path) -> None:
    (project / "wasmext.toml").write_text(TYPOS)
    broken = project / "plugins" / "broken"
    broken.mkdir()
    (broken / "plugin.toml").write_text('id = "Broken"\nversion = "1.0.0"\n')
    result = CliRunner().invoke(main, ["run", "t.json"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [ln.removeprefix("  warning: ") for ln in lines if "warning: " in ln] == \
        UNMET
    not_loaded = [ln for ln in lines if "not loaded: " in ln]
    assert len(not_loaded) == 1 and not_loaded[0].startswith("  not loaded: manifest: ")
    assert "plugins: nosy" in lines[0]  # the plugins it found still run
    doc = json.loads(CliRunner().invoke(main, ["run", "t.json", "--json"]).stdout)
    assert doc["warnings"] == UNMET


def test_list_names_them_too_and_nothing_for_a_config_that_matches(project: Path) -> None:
    (project / "wasmext.toml").write_text(TYPOS)
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0, result.output
    assert [ln for ln in result.stderr.splitlines() if ln.startswith("warning: ")] == \
        [f"warning: {u}" for u in UNMET]
    (project / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
        'disabled = ["nosy"]\n[plugin.nosy]\nsettings = { greeting = "hi" }\n')
    quiet = CliRunner().invoke(main, ["list", "--json"])
    assert json.loads(quiet.stdout)["warnings"] == [] and "warning" not in quiet.stderr


def test_list_inside_a_plugin_project_says_where_to_point_it(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`wasmext list --plugins .` in the project `wasmext new` made found nothing and said
    only "no plugin loaded from ."."""
    monkeypatch.chdir(project / "plugins" / "nosy")
    result = CliRunner().invoke(main, ["list", "--plugins", "."])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == (
        "no plugin loaded from . (. is itself a plugin folder: --plugins takes the folder "
        f"holding plugin folders, such as {project.resolve() / 'plugins'})")
    assert "nosy" in CliRunner().invoke(main, ["list", "--plugins", ".."]).stdout


def test_a_variable_the_environment_lacks_withholds_nothing_and_says_nothing(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a value kept from the plugin is news: with the variable unset, every `wasmext
    run` of a plugin whose setting names one printed the refusal all the same."""
    monkeypatch.delenv(VARIABLE)
    result = CliRunner().invoke(main, ["list", "--settings"])
    assert result.exit_code == 0, result.output
    assert _notices(result.stderr) == [] and VARIABLE not in result.stderr


def test_the_notices_end_with_their_command(project: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """An application calling the commands in-process (a test, say) gets no notice lines
    from its own hosts afterwards."""
    assert CliRunner().invoke(main, ["run", "t.json"]).exit_code == 0
    with make_host((project / "plugins" / "nosy", {"plugin_id": "nosy"})) as host, \
            host.session() as session:
        session.on_plain_text("hi")  # denied state.get: logged, not printed
    assert "wasmext: plugin nosy" not in capsys.readouterr().err


def test_run_names_a_policy_stage_that_is_nowhere(project: Path) -> None:
    """A policy naming a plugin that is not loaded blocked every turn, and only the turns
    said why."""
    (project / "policy.toml").write_text(
        'policy_id = "p"\n[[validators]]\nid = "ghost"\non_fail = "block"\n'
        '[[pre]]\nid = "nosy"\n')
    result = CliRunner().invoke(main, ["run", "t.json", "--policy", "policy.toml"])
    assert result.exit_code == 0, result.output
    assert [ln for ln in result.stderr.splitlines() if "warning" in ln] == [
        "wasmext: warning: policy.toml names stage ghost, which is no loaded plugin and no "
        "[extensions.ghost] of the config"]
    assert "plugin ghost is not loaded" in result.stdout  # what the turn itself says


def test_the_denial_line_says_what_happens_to_later_denials(tmp_path: Path) -> None:
    """A call asking twice for what it lacks gets one line, which says the second went
    unreported; it names the call's own session (`call` has one, of one fixed name)."""
    raw = msgpack.packb({"op": "state.get", "key": "k"})
    ask = f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)})))"
    wasm = tmp_path / "twice.wasm"
    wasm.write_bytes(wasmtime.wat2wasm(guest_wat(f"{ask} {ask} (i64.const 0)",
                                                 imports=HOST_CALL_IMPORT, data=raw)))
    result = CliRunner().invoke(main, ["call", str(wasm), "test", "--data", '"x"'])
    assert result.exit_code == 0, result.output
    denials = [line for line in result.stderr.splitlines() if "denied" in line]
    assert denials == ["wasmext: plugin twice was denied state.get in session wasmext-call: "
                       "plugin twice was not granted 'state' (later denials of state.get in "
                       "this session are not reported); to allow it: --grant state"]


def test_call_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    """The SDKs' state wrappers write the session scope by default: `call` gives the hook a
    session (one fixed name, no session_start or session_end run), where a call without
    one was refused ("there is no session")."""
    raw = msgpack.packb({"op": "state.set", "key": "k", "value": 1})
    answer = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    wasm = tmp_path / "keeper.wasm"
    wasm.write_bytes(wasmtime.wat2wasm(guest_wat(answer, imports=HOST_CALL_IMPORT, data=raw)))
    result = CliRunner().invoke(main, ["call", str(wasm), "test", "--grant", "state"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) is None
    refused = CliRunner().invoke(main, ["call", str(wasm), "test"])  # no grant: still said
    assert refused.exit_code != 0
    assert "not granted 'state'" in refused.output
