"""Settings and state an operator can see and trust: typed settings refused by name,
shown masked by `inspect` and `list --settings`, set by `wasmext config set`; disabled
plugins listed; `disable --purge-state` the seed's cleanup, asked for, never silent."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import wasmtime

from wasmext import Host, load_config
from wasmext.errors import ConfigError, ManifestError
from wasmext.manifest import load_manifest
from wasmext.operator_settings import SettingsFile
from wasmext.state import Scope
from wasmext.testing import guest_wat

ROOT = Path(__file__).resolve().parents[2]
SECRET = "tok-9f1c2ab7e4"

MANIFEST = """\
id = "counter"
version = "1.0.0"

[settings.count]
default = 3
description = "How many."

[settings.label]
default = "plain"

[settings.ratio]
type = "number"

[settings.api_token]
type = "string"
sensitive = true
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def plugin_folder(parent: Path, pid: str, manifest: str) -> Path:
    folder = parent / pid
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text(manifest)
    wat = guest_wat(registration={"hooks": [{"hook": "on_plain_text"}], "name": pid})
    (folder / f"{pid}.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))
    return folder


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    plugin_folder(tmp_path / "plugins", "counter", MANIFEST)
    plugin_folder(tmp_path / "plugins", "quiet", 'id = "quiet"\nversion = "0.1.0"\n')
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
        'disabled = ["quiet"]\n'
        f'[plugin.counter]\nsettings = {{ label = "from-config", api_token = "{SECRET}" }}\n')
    return tmp_path


def listed(workspace: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    proc = cli("list", "--settings", "--json", cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    return {p["id"]: p for p in json.loads(proc.stdout)["plugins"]}


def test_config_set_is_checked_saved_and_shown(workspace: Path) -> None:
    before = listed(workspace)
    rows = {s["name"]: s for s in before["counter"]["settings"]}
    assert (rows["count"]["value"], rows["count"]["source"], rows["count"]["type"]) == \
        (3, "default", "integer")
    assert (rows["label"]["value"], rows["label"]["source"]) == ("from-config", "config")
    assert rows["api_token"]["value"] == "********" and rows["api_token"]["sensitive"]
    assert rows["ratio"]["source"] == "unset"

    refused = cli("config", "set", "counter", "count", "many", cwd=workspace)
    assert refused.returncode == 2  # a bad argument, as `call --set` (and click) say it
    assert "setting 'count' must be an integer, not 'many'" in refused.stderr
    assert not (workspace / "data" / "settings.json").exists(), "nothing written"
    unknown = cli("config", "set", "counter", "cuont", "4", cwd=workspace)
    assert unknown.returncode == 2 and "unknown setting 'cuont'" in unknown.stderr
    assert "declared: count, label, ratio, api_token" in unknown.stderr
    nobody = cli("config", "set", "nobody", "count", "4", cwd=workspace)
    assert nobody.returncode == 1 and "plugin nobody is not installed in " in nobody.stderr

    for key, value in (("count", "7"), ("label", "set-by-me"), ("ratio", "2"),
                       ("api_token", "tok-new-0042")):
        proc = cli("config", "set", "counter", key, value, cwd=workspace)
        assert proc.returncode == 0, proc.stderr
    assert "tok-new-0042" not in proc.stdout  # a sensitive value is not echoed
    saved = workspace / "data" / "settings.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    after = {s["name"]: s for s in listed(workspace)["counter"]["settings"]}
    assert (after["count"]["value"], after["count"]["source"]) == (7, "set")
    assert (after["label"]["value"], after["label"]["source"]) == ("set-by-me", "set")
    assert after["ratio"]["value"] == 2
    assert after["api_token"]["value"] == "********"

    # The plugin itself gets the values (Host.from_config, the documented API).
    with Host.from_config(workspace / "wasmext.toml") as host:
        plugin = host.plugins["counter"].plugin
        assert plugin.settings["count"] == 7 and plugin.settings["api_token"] == "tok-new-0042"
        assert host.plugins["counter"].plugin.call("on_plain_text", "x").value == "ok"

    assert cli("config", "unset", "counter", "label", cwd=workspace).returncode == 0
    back = {s["name"]: s for s in listed(workspace)["counter"]["settings"]}
    assert (back["label"]["value"], back["label"]["source"]) == ("from-config", "config")


def test_config_unset_of_a_setting_never_declared_nor_set_is_refused(workspace: Path) -> None:
    """`config unset counter lable` said "was not set", exit 0, while `label` stayed set:
    a typo is refused as `config set` refuses it. A value saved for a setting plugin.toml
    has since dropped can still be unset."""
    saved = cli("config", "set", "counter", "label", "mine", cwd=workspace)
    assert saved.returncode == 0, saved.stderr
    # A `wasmext call` after it answers with the manifest's value: the line says why.
    assert "used when the plugin next loads under this config: run, mcp serve, worker; " \
        "`wasmext call` takes --set instead" in saved.stdout
    typo = cli("config", "unset", "counter", "lable", cwd=workspace)
    assert typo.returncode == 2 and typo.stdout == ""
    assert "unknown setting 'lable'; declared: count, label, ratio, api_token" in typo.stderr
    unset_declared = cli("config", "unset", "counter", "count", cwd=workspace)
    assert unset_declared.returncode == 0 and "count: was not set" in unset_declared.stdout
    SettingsFile(workspace / "data").set(load_manifest(
        workspace / "plugins" / "counter" / "plugin.toml"), "label", "kept")
    manifest = workspace / "plugins" / "counter" / "plugin.toml"
    manifest.write_text(MANIFEST.replace('[settings.label]\ndefault = "plain"\n', ""))
    gone = cli("config", "unset", "counter", "label", cwd=workspace)
    assert gone.returncode == 0 and "label: unset" in gone.stdout, gone.stderr


def test_a_config_value_of_the_wrong_type_is_a_load_error_naming_the_field(
        workspace: Path) -> None:
    toml = workspace / "wasmext.toml"
    toml.write_text(toml.read_text().replace('label = "from-config"', 'count = "many"'))
    proc = cli("list", "--json", cwd=workspace)
    doc = json.loads(proc.stdout)
    assert "counter" not in {p["id"] for p in doc["plugins"] if p["enabled"]}
    assert any("setting 'count' must be an integer, not 'many'" in e for e in doc["errors"])
    assert SECRET not in proc.stdout + proc.stderr


def test_a_sensitive_value_of_the_wrong_type_is_not_repeated(workspace: Path) -> None:
    toml = workspace / "wasmext.toml"
    toml.write_text(toml.read_text().replace(f'api_token = "{SECRET}"', "api_token = 91827364"))
    with Host(load_config(toml)) as host:
        said = " ".join(e.describe() for e in host.load_errors)
    assert "setting 'api_token' must be a string, not a value of another type" in said
    assert "91827364" not in said


def test_a_default_of_another_type_than_declared_is_a_manifest_error(tmp_path: Path) -> None:
    toml = tmp_path / "plugin.toml"
    toml.write_text('id = "x"\nversion = "1.0.0"\n[settings.n]\ntype = "integer"\n'
                    'default = "three"\n')
    with pytest.raises(ManifestError) as info:
        load_manifest(toml)
    assert info.value.field == "settings.n.default"
    toml.write_text('id = "x"\nversion = "1.0.0"\n[settings.n]\ntype = "int"\n')
    with pytest.raises(ManifestError, match=r"settings\.n\.type"):
        load_manifest(toml)


def test_inspect_shows_declared_settings_masked(workspace: Path) -> None:
    folder = workspace / "plugins" / "counter"
    (folder / "plugin.toml").write_text(MANIFEST.replace(
        'type = "string"\nsensitive = true', f'default = "{SECRET}"\nsensitive = true'))
    text = cli("inspect", str(folder), cwd=workspace)
    assert text.returncode == 0, text.stderr
    assert "count" in text.stdout and "integer" in text.stdout and SECRET not in text.stdout
    doc = json.loads(cli("inspect", str(folder), "--json", cwd=workspace).stdout)
    rows = {s["name"]: s for s in doc["settings"]}
    assert rows["count"] == {"name": "count", "type": "integer", "sensitive": False,
                             "required": False, "env": None, "description": "How many.",
                             "default": 3}
    assert rows["api_token"]["default"] == "********"


def test_list_shows_disabled_plugins_marked(workspace: Path) -> None:
    plugins = listed(workspace)
    assert plugins["quiet"]["enabled"] is False and plugins["counter"]["enabled"] is True
    plain = cli("list", cwd=workspace)
    assert plain.returncode == 0
    assert any(line.startswith("quiet") and "disabled" in line
               for line in plain.stdout.splitlines())
    assert cli("enable", "quiet", cwd=workspace).returncode == 0
    assert listed(workspace)["quiet"]["enabled"] is True


def test_disable_keeps_state_unless_asked_to_purge_it(workspace: Path) -> None:
    config = load_config(workspace / "wasmext.toml")
    with Host(config) as host:
        store = host.state_store()
        store.set(Scope("counter"), "k", b"\x01")
        host.disable("counter")
        assert store.get(Scope("counter"), "k") == b"\x01", "kept unless asked"
        assert "counter" in host.disabled
        host.enable("counter")
        host.rescan()
        assert "counter" in host.plugins
        host.unload("counter", purge_state=True)
        assert store.get(Scope("counter"), "k") is None
        store.set(Scope("counter"), "k", b"\x02")
    proc = cli("disable", "counter", "--purge-state", cwd=workspace)
    assert proc.returncode == 0, proc.stderr
    assert "1 state entries purged" in proc.stdout
    with Host(load_config(workspace / "wasmext.toml")) as host:
        assert host.state_store().get(Scope("counter"), "k") is None
        assert "counter" not in host.plugins and "counter" in host.disabled


def test_a_broken_settings_file_is_refused_not_ignored(workspace: Path) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "settings.json").write_text("{not json")
    with Host(load_config(workspace / "wasmext.toml")) as host:
        said = " ".join(e.describe() for e in host.load_errors)
    assert "settings.json: not a settings file" in said
    with pytest.raises(ConfigError):
        SettingsFile(workspace / "data").read()


def test_a_string_setting_takes_the_text_as_typed(workspace: Path) -> None:
    """`--set label=1234` was the integer 1234, refused for a string setting ("must be a
    string, not 1234"); for a string setting the command line's text is the value."""
    from wasmext.testing import host_calls_wat

    reader = workspace / "reader"
    reader.mkdir()
    (reader / "plugin.toml").write_text(MANIFEST.replace('"counter"', '"reader"'))
    (reader / "reader.wasm").write_bytes(bytes(wasmtime.wat2wasm(
        host_calls_wat({"op": "config.get", "key": "label"}))))
    for typed, value in (("1234", "1234"), ("true", "true"), ('"quoted"', "quoted"),
                         ("plain words", "plain words")):
        called = cli("call", str(reader), "test", "--set", f"label={typed}", cwd=workspace)
        assert called.returncode == 0, called.stderr
        assert json.loads(called.stdout) == value
    wrong = cli("call", str(reader), "test", "--set", "count=many", cwd=workspace)
    assert wrong.returncode == 2 and "setting 'count' must be an integer" in wrong.stderr
    assert cli("config", "set", "counter", "label", "1234", cwd=workspace).returncode == 0
    rows = {s["name"]: s for s in listed(workspace)["counter"]["settings"]}
    assert rows["label"]["value"] == "1234" and rows["count"]["value"] == 3
