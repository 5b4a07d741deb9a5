"""What an operator trips on, answered where it happens: `wasmext grant` refuses a
capability that does not exist, `inspect` and `list` show what a plugin asks for,
`mcp serve` with nothing to serve says so, `worker` and `nats ls` name the missing
extra, `uninstall` removes a plugin whose plugin.toml no longer parses, and a plugin
denied a grant in a session is logged once, at warning level."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
import wasmtime
from hypothesis import given
from hypothesis import strategies as st

from wasmext import Host, load_config
from wasmext.capabilities import PATTERNED, capability_problem
from wasmext.files import atomic_write
from wasmext.lifecycle.approvals import ApprovalStore
from wasmext.testing import DATA_AT, guest_wat, make_host

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ["state", "events", "tools", "secrets", "http", "llm", "agents", "resources",
         "prompts"]
HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60,
        python: tuple[str, ...] = ("-m", "wasmext_cli")) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    return subprocess.run([sys.executable, *python, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def write_plugin(parent: Path, pid: str, extra_toml: str = "",
                 hooks: tuple[str, ...] = ("test",)) -> Path:
    folder = parent / pid
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "0.1.0"\n{extra_toml}')
    atomic_write(folder / f"{pid}.wasm", bytes(wasmtime.wat2wasm(guest_wat(hooks=hooks))))
    return folder


def workspace(tmp_path: Path) -> Path:
    write_plugin(tmp_path / "plugins", "kb", 'capabilities = ["state", "http:api.example.com"]\n')
    write_plugin(tmp_path / "plugins", "keep")
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    return config


# --- grants ------------------------------------------------------------------------------

def test_grant_refuses_a_capability_that_does_not_exist(tmp_path: Path) -> None:
    config = workspace(tmp_path)
    proc = cli("grant", "kb", "state", "htttp", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith("wasmext: plugin kb: ")
    assert "'htttp' is not a capability; did you mean 'http'?" in line
    assert all(k in line for k in KNOWN) and "http:<host pattern>" in line
    assert ApprovalStore.in_data_dir(tmp_path / "data").all() == []  # nothing recorded
    ok = cli("grant", "kb", "state", "http:api.example.com", "--by", "ann", "--config",
             str(config), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert {a.capability for a in ApprovalStore.in_data_dir(tmp_path / "data").all()} == \
        {"state", "http:api.example.com"}


def test_an_rw_folder_grant_to_a_component_says_it_is_read_only(tmp_path: Path) -> None:
    """A component's folder is read-only even when granted rw (docs/sandbox.md, Folder
    grants); `grant` says so where the operator grants it, and `grant --help` too."""
    config = workspace(tmp_path)
    (tmp_path / "plugins" / "kb" / "kb.wasm").write_bytes(
        bytes(wasmtime.wat2wasm("(component)")))  # only its header is read here
    notes = tmp_path / "notes"
    notes.mkdir()
    shown = cli("grant", "kb", f"fs:{notes}:rw", "fs:/srv/ro", "--by", "ann", "--config",
                str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    note = shown.stdout.splitlines()[-1]
    assert note == (f"note: kb is a component: it sees fs:{notes}:rw read-only (the [fs] "
                    "quota cannot bound a component's writes)")
    core = cli("grant", "keep", f"fs:{notes}:rw", "--by", "ann", "--config", str(config),
               cwd=tmp_path)
    assert core.returncode == 0 and "note:" not in core.stdout  # a core module writes
    assert "read-only even when granted rw" in " ".join(
        cli("grant", "--help", cwd=tmp_path).stdout.split())


def test_grant_of_a_plugin_it_cannot_find_says_where_it_looked(tmp_path: Path) -> None:
    """`wasmext grant kb state` with no config said only "plugin kb is not installed"."""
    alone = cli("grant", "kb", "state", cwd=tmp_path)
    assert alone.returncode == 1
    assert alone.stderr.strip() == (
        "wasmext: plugin kb is not installed (no ./wasmext.toml here, so "
        "no plugin folder to look in: give --config FILE, whose [plugins] workspace_dir "
        "holds the plugin)")
    config = workspace(tmp_path)
    missing = cli("grant", "nobody", "state", "--config", str(config), cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith(f"plugin nobody is not installed in {tmp_path}/plugins")

@pytest.mark.parametrize(("typo", "meant"), [("stat", "state"), ("secret", "secrets"),
                                             ("toolz:lookup", "tool:lookup"),
                                             ("evnets", "events")])
def test_a_typo_names_the_capability_meant(typo: str, meant: str) -> None:
    assert f"did you mean {meant!r}?" in (capability_problem(typo) or "")


PATTERN_GRANTS = st.builds(lambda k, p: f"{k}:{p}", st.sampled_from(sorted(PATTERNED)),
                           st.text(min_size=1, max_size=40))


@given(st.sampled_from(KNOWN) | PATTERN_GRANTS)
def test_every_grant_form_is_accepted(capability: str) -> None:
    assert capability_problem(capability) is None


@given(st.text(max_size=300))
def test_any_capability_is_accepted_or_refused_in_one_inert_line(capability: str) -> None:
    problem = capability_problem(capability)
    if problem is not None:
        assert "\n" not in problem and "\x1b" not in problem and len(problem) <= 600
        assert "a grant is one of" in problem or "has an empty pattern" in problem or \
            "grants nothing without what it names" in problem


@pytest.mark.parametrize(("bare", "form"), [("fs", "fs:<absolute folder>[:ro|rw]"),
                                            ("tool", "tool:<tool pattern>"),
                                            ("emit", "emit:<topic pattern>")])
def test_a_kind_without_its_pattern_says_what_to_write(bare: str, form: str) -> None:
    """`wasmext grant kb fs` once answered "did you mean 'fs'?"."""
    assert capability_problem(bare) == \
        f"{bare!r} grants nothing without what it names; write {form}"


def test_a_grant_of_an_mcp_server_the_manifest_does_not_declare_says_it_runs_nothing(
        tmp_path: Path) -> None:
    """`wasmext grant kb mcp-server:sied` was recorded in silence: a grant that runs
    nothing, and the server meant still not running."""
    write_plugin(tmp_path / "plugins", "kb", '[mcp.servers.side]\ncommand = "true"\n')
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    typo = cli("grant", "kb", "mcp-server:sied", "state", cwd=tmp_path)
    assert typo.returncode == 0, typo.stderr  # recorded: the operator's decision stands
    assert "note: kb's plugin.toml declares no MCP server 'sied' (it declares: side), so " \
        "this grant runs nothing" in typo.stdout
    right = cli("grant", "kb", "mcp-server:side", cwd=tmp_path)
    assert right.returncode == 0 and "note:" not in right.stdout
    write_plugin(tmp_path / "plugins", "plain")
    none = cli("grant", "plain", "mcp-server:side", cwd=tmp_path)
    assert "(it declares: none)" in none.stdout


def test_a_config_grant_the_host_withholds_is_said_on_stderr(tmp_path: Path) -> None:
    """[grants.kb] giving mcp-server:side without the manifest pin is withheld, and a
    recorded approval of a plugin changed since: both were warnings on --json-logs only,
    while `run` said the plugin asked "without the grant" the operator had written."""
    folder = write_plugin(tmp_path / "plugins", "kb", '[mcp.servers.side]\ncommand = "true"\n')
    digest = hashlib.sha256((folder / "kb.wasm").read_bytes()).hexdigest()
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
                      f'[grants.kb]\ndigest = "sha256:{digest}"\n'
                      'capabilities = ["mcp-server:side", "state"]\n')
    listed = cli("list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "wasmext: plugin kb: [grants.kb] gives mcp-server:side without pinning " \
        "plugin.toml" in listed.stderr
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    assert cli("grant", "kb", "state", cwd=tmp_path).returncode == 0
    (folder / "plugin.toml").write_text('id = "kb"\nversion = "0.2.0"\n')
    changed = cli("list", cwd=tmp_path)
    assert "wasmext: plugin kb changed (plugin.toml) since its approvals were recorded; " \
        "they are withheld until granted again" in changed.stderr, changed.stderr
    quiet = cli("list", "--json", cwd=tmp_path)  # --json alone still says it on stderr
    assert "withheld" in quiet.stderr


def test_revoke_says_what_the_config_still_grants(tmp_path: Path) -> None:
    """`wasmext revoke kb state` of a grant written in [grants.kb] said "revoked 0
    approvals of kb" and nothing else: the plugin kept `state`."""
    folder = write_plugin(tmp_path / "plugins", "kb")
    digest = hashlib.sha256((folder / "kb.wasm").read_bytes()).hexdigest()
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
        f'[grants.kb]\ndigest = "sha256:{digest}"\ncapabilities = ["state", "events"]\n')
    one = cli("revoke", "kb", "state", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == [
        "revoked 0 approvals of kb",
        "note: [grants.kb] in the config still grants state: remove it there"]
    every = cli("revoke", "kb", cwd=tmp_path)
    assert "still grants events, state: remove it there" in every.stdout
    other = cli("revoke", "kb", "http:x.example", cwd=tmp_path)
    assert "note:" not in other.stdout  # nothing the config gives was named
    # `wasmext grants` listed nothing at all: the config's grants are said beside it.
    listed = cli("grants", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout == ""
    assert listed.stderr.strip() == "note: [grants.kb] in the config also grants events, state"
    (tmp_path / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n')
    empty = cli("grants", cwd=tmp_path)
    assert empty.stderr.strip() == \
        "no recorded approvals (wasmext grant ID CAPABILITY records one)"


def test_call_refuses_a_grant_that_does_not_exist(tmp_path: Path) -> None:
    """`wasmext call --grant htttp` ran the plugin with a grant nothing checks."""
    proc = cli("call", str(tmp_path), "test", "--grant", "state", "--grant", "htttp",
               cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Invalid value for --grant: 'htttp' is not a capability; did you mean " \
           "'http'?" in " ".join(proc.stderr.split())


# --- what a plugin asks for ---------------------------------------------------------------

def test_inspect_and_list_show_the_capabilities_a_manifest_declares(tmp_path: Path) -> None:
    config = workspace(tmp_path)
    kb = tmp_path / "plugins" / "kb"
    text = cli("inspect", str(kb), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "asks for  state, http:api.example.com (manifest capabilities" in text.stdout
    doc = json.loads(cli("inspect", str(kb), "--json", cwd=tmp_path).stdout)
    assert doc["capabilities"] == ["state", "http:api.example.com"]
    listed = cli("list", "--config", str(config), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {ln.split()[0]: ln for ln in listed.stdout.splitlines() if "failure=" in ln}
    assert rows["kb"].endswith("asks=state,http:api.example.com")
    assert rows["keep"].endswith("asks=-")
    plugins = json.loads(cli("list", "--json", "--config", str(config), cwd=tmp_path).stdout)
    asks = {p["id"]: p["capabilities"] for p in plugins["plugins"]}
    assert asks == {"kb": ["state", "http:api.example.com"], "keep": []}


def test_an_mcp_server_a_manifest_declares_is_asked_for(tmp_path: Path) -> None:
    """A manifest's [mcp.servers.side] runs only with the grant mcp-server:side, yet
    inspect and list said `asks for -`: the operator had nothing telling them to grant it."""
    write_plugin(tmp_path / "plugins", "side", 'capabilities = ["state"]\n'
                 '[mcp.servers.side]\ncommand = "true"\n')
    text = cli("inspect", str(tmp_path / "plugins" / "side"), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "asks for  state, mcp-server:side (manifest capabilities and MCP servers" \
        in text.stdout
    plugins = json.loads(cli("list", "--json", "--plugins", "plugins", cwd=tmp_path).stdout)
    assert [p["capabilities"] for p in plugins["plugins"]] == [["state", "mcp-server:side"]]


# --- mcp serve with nothing to serve --------------------------------------------------------

def test_mcp_serve_with_nothing_to_serve_says_so(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = cli("mcp", "serve", cwd=tmp_path)
    assert time.monotonic() - started < 30
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        "wasmext: nothing to serve: no plugin loaded and no tool (no plugin folder "
        "configured); name a folder of plugins with --plugins DIR or [plugins] "
        "workspace_dir in wasmext.toml")
    empty = tmp_path / "plugins"
    empty.mkdir()
    unwatched = cli("mcp", "serve", "--plugins", str(empty), "--no-watch", cwd=tmp_path)
    assert unwatched.returncode == 2 and f"looked in {empty}" in unwatched.stderr
    # Watched, the folder may yet get a plugin: a notice, and it serves (stdin closed: ends).
    watched = cli("mcp", "serve", "--plugins", str(empty), cwd=tmp_path)
    assert watched.returncode == 0, watched.stderr
    assert f"nothing to serve yet: no plugin in {empty}" in watched.stderr
    write_plugin(empty, "kb")
    served = cli("mcp", "serve", "--plugins", str(empty), "--no-watch", cwd=tmp_path)
    assert served.returncode == 0 and "nothing to serve" not in served.stderr, served.stderr


# --- the nats extra --------------------------------------------------------------------------

def _without(module: str) -> tuple[str, ...]:
    """`python -c` running the CLI with `module` unimportable, as when the extra is absent."""
    return ("-c", f"import runpy, sys; sys.modules[{module!r}] = None; "
                  "sys.argv = ['wasmext', *sys.argv[1:]]; "
                  "runpy.run_module('wasmext_cli', run_name='__main__')")


@pytest.mark.parametrize("module", ["msgspec", "nats"])
@pytest.mark.parametrize("command", [("worker",), ("nats", "ls")])
def test_worker_and_nats_ls_without_the_extra_name_it(tmp_path: Path, module: str,
                                                      command: tuple[str, ...]) -> None:
    proc = cli(*command, cwd=tmp_path, python=_without(module))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"wasmext: `wasmext {' '.join(command)}` needs the nats extra (module {module} is not "
        "installed); install it with: pip install 'wasmext[nats]'")


@pytest.mark.parametrize("module", ["msgspec", "nats"])
def test_run_needs_no_nats_extra_for_an_in_process_policy(tmp_path: Path, module: str) -> None:
    # The example session routes its policy in-process: no NATS, so no `nats` extra.
    proc = cli("run", cwd=tmp_path, python=_without(module))
    assert proc.returncode == 0, proc.stderr
    assert "hooks fired:" in proc.stdout


# --- uninstall a broken plugin ----------------------------------------------------------------

@pytest.mark.parametrize("folder_name", ["kb", "kb-old"])
def test_uninstall_removes_a_plugin_whose_manifest_no_longer_parses(tmp_path: Path,
                                                                   folder_name: str) -> None:
    config = workspace(tmp_path)
    broken = tmp_path / "plugins" / "kb"
    if folder_name != "kb":
        broken = broken.rename(tmp_path / "plugins" / folder_name)
    (broken / "plugin.toml").write_text('id = "kb"\nversion = [the bracket never closes\n')
    other = write_plugin(tmp_path / "plugins", "other")
    (other / "plugin.toml").write_text('id = "other"\nversion = [broken too\n')
    ApprovalStore.in_data_dir(tmp_path / "data").grant("kb", _subject(), ["state"], "ann")
    proc = cli("uninstall", "kb", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"uninstalled kb (folder {broken};")
    assert "1 approvals revoked" in proc.stdout
    assert not broken.exists() and other.is_dir()  # the other broken plugin is not kb's
    assert (tmp_path / "plugins" / "keep").is_dir()
    again = cli("uninstall", "kb", "--config", str(config), cwd=tmp_path)
    assert again.returncode == 1 and "not installed" in again.stderr
    with Host(load_config(config)) as host:
        assert "keep" in host.plugins  # healthy after


def _subject():  # type: ignore[no-untyped-def]
    from wasmext.lifecycle.approvals import Subject

    return Subject("sha256:" + "0" * 64)


# --- a denied grant in a session ---------------------------------------------------------------

def _asks_for_state() -> str:
    raw = msgpack.packb({"op": "state.get", "key": "k"})
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    return guest_wat(body, imports=HOST_CALL, data=raw, hooks=("on_plain_text",))


def test_a_denied_grant_is_logged_once_per_session_at_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    healthy = guest_wat(response={"ok": True, "value": "alive"}, hooks=("on_plain_text",))
    with make_host((_asks_for_state(), {"plugin_id": "nosy"}),
                   (healthy, {"plugin_id": "healthy", "priority": 10})) as host, \
            caplog.at_level(logging.WARNING, logger="wasmext.sandbox.hostcalls"):
        for session_id in ("s1", "s2"):
            with host.session(session_id) as session:
                for _ in range(5):
                    assert session.on_plain_text("hi").value == "alive"
        denials = [r for r in caplog.records if r.name == "wasmext.sandbox.hostcalls"]
    assert [r.levelno for r in denials] == [logging.WARNING] * 2
    assert [getattr(r, "session", None) for r in denials] == ["s1", "s2"]
    for record in denials:
        text = record.getMessage()
        assert text.startswith("plugin nosy was denied state.get in session s")
        assert "not granted 'state'" in text and getattr(record, "plugin_id", None) == "nosy"
        # ... and says what the four calls after it in its session showed: no line.
        assert text.endswith("(later denials of state.get in this session are not reported)")


def test_denials_remembered_are_bounded(caplog: pytest.LogCaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from wasmext.sandbox import hostcalls

    monkeypatch.setattr(hostcalls, "DENIALS_REMEMBERED", 8)
    with make_host((_asks_for_state(), {"plugin_id": "nosy"})) as host, \
            caplog.at_level(logging.WARNING, logger="wasmext.sandbox.hostcalls"):
        for n in range(40):
            with host.session(f"s{n}") as session:
                session.on_plain_text("hi")
        assert len(host.runtime.services._denials_logged) == 8
    assert len([r for r in caplog.records if r.name == "wasmext.sandbox.hostcalls"]) == 40


@pytest.mark.parametrize("module", ["msgspec", "nats"])
@pytest.mark.parametrize("command", [("run",), ("list",), ("mcp", "serve")])
def test_a_nats_server_to_use_without_the_extra_names_it(tmp_path: Path, module: str,
                                                         command: tuple[str, ...]) -> None:
    """Remote stages or plugins without the extra said "nats unavailable: cannot connect
    to nats://...: No module named 'nats'" (`run`): a server to check, not a package."""
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n'
        '[extensions.guard]\ntype = "validator"\nsubject = "wasmext.ext.validate.g.v0"\n'
        '[remote.kb]\nsubject = "wasmext.plugin.kb.v0"\n')
    (tmp_path / "policy.toml").write_text('[[validators]]\nid = "guard"\n')
    (tmp_path / "t.json").write_text('{"turns": [{"user": "hi", "steps": [{"response": "o"}]}]}')
    extra = ["t.json", "--policy", "policy.toml"] if command == ("run",) else []
    proc = cli(*command, *extra, "--config", "wasmext.toml", "--nats", "nats://127.0.0.1:9",
               cwd=tmp_path, python=_without(module))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"wasmext: `wasmext {' '.join(command)}` needs the nats extra (module {module} is not "
        "installed); install it with: pip install 'wasmext[nats]'")
    assert "Traceback" not in proc.stderr
