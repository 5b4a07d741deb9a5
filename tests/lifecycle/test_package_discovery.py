"""Plugins that installed Python packages declare under the `wasmext.plugins` entry point.

Each test lays out a site-packages folder as pip leaves it (a package folder and a
.dist-info with RECORD and entry_points.txt) and puts it on sys.path; the slow wheel
test (test_plugin_wheel.py) does the same with pip itself.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import wasmtime

from wasmext import Host
from wasmext.config import HostConfig, parse_config
from wasmext.discovery import PACKAGES, discover
from wasmext.errors import ConfigError
from wasmext.lifecycle.approvals import ApprovalStore, subject_of
from wasmext.lifecycle.uninstall import uninstall
from wasmext.manifest import load_folder
from wasmext.testing import guest_wat

MODULE = bytes(wasmtime.wat2wasm(guest_wat(hooks=("on_plain_text",), response={
    "ok": True, "value": "from a wheel"})))


def _install(site: Path, dist: str, entry: str, value: str, plugin_id: str,
             files: dict[str, bytes] | None = None) -> Path:
    """A distribution `dist` as pip installs it: `value`'s folder with plugin.toml
    (id `plugin_id`, asking for `state`) and the module, and its .dist-info."""
    package = site / Path(*value.split(":")[0].split("."))
    package.mkdir(parents=True, exist_ok=True)
    contents = files if files is not None else {
        "plugin.toml": (f'id = "{plugin_id}"\nversion = "1.0.0"\nabi = 1\n'
                        'capabilities = ["state"]\n').encode(),
        f"{plugin_id}.wasm": MODULE}
    for name, data in contents.items():
        (package / name).write_bytes(data)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"  # as pip names it
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[wasmext.plugins]\n{entry} = {value}\n")
    rel = package.relative_to(site).as_posix()
    record = [f"{rel}/{name},," for name in contents] + [f"{info.name}/METADATA,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return package


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def _host(tmp_path: Path, *, entry_points: bool, workspace: Path | None = None) -> Host:
    table = {"plugins": {"entry_points": entry_points}, "host": {"data_dir": "data"},
             "state": {"backend": "memory"}}
    if workspace is not None:
        table["plugins"]["workspace_dir"] = str(workspace)
    return Host(parse_config(table, tmp_path / "wasmext.toml"))


def test_entry_point_discovery_is_off_by_default(site: Path, tmp_path: Path) -> None:
    _install(site, "wasmext-plugin-shout", "shout", "wasmext_plugin_shout", "shout")
    assert HostConfig().entry_points is False
    assert PACKAGES not in parse_config({}, tmp_path / "wasmext.toml").plugin_dirs()
    with _host(tmp_path, entry_points=False) as host:
        assert "shout" not in host.plugins


def test_an_installed_plugin_loads_with_no_grants_until_the_operator_approves(
        site: Path, tmp_path: Path) -> None:
    folder = _install(site, "wasmext-plugin-shout", "shout", "wasmext_plugin_shout", "shout")
    with _host(tmp_path, entry_points=True) as host:
        lp = host.plugins["shout"]
        assert lp.source == "package"
        assert lp.plugin.grants == frozenset()  # it asks for state; nobody granted it
        assert lp.plugin.call("on_plain_text", "hi").value == "from a wheel"
    manifest = load_folder(folder)
    ApprovalStore.in_data_dir(tmp_path / "data").grant(
        "shout", subject_of("sha256:" + hashlib.sha256(MODULE).hexdigest(), manifest),
        ["state"], "operator", str(folder))
    with _host(tmp_path, entry_points=True) as host:
        assert host.plugins["shout"].plugin.grants == frozenset({"state"})
    # An upgrade (a different module in the same package) does not inherit the grant.
    (folder / "shout.wasm").write_bytes(bytes(wasmtime.wat2wasm(guest_wat(
        hooks=("on_plain_text",), response={"ok": True, "value": "upgraded"}))))
    with _host(tmp_path, entry_points=True) as host:
        assert host.plugins["shout"].plugin.grants == frozenset()


def test_hostile_entry_points_are_refused_and_the_rest_still_load(
        site: Path, tmp_path: Path) -> None:
    _install(site, "wasmext-plugin-good", "good", "wasmext_plugin_good", "good")
    # Names another distribution's folder (not in its own RECORD).
    _install(site, "wasmext-plugin-other", "other", "wasmext_plugin_other", "other")
    thief = site / "thief-1.0.dist-info"
    thief.mkdir()
    (thief / "METADATA").write_text("Metadata-Version: 2.1\nName: thief\nVersion: 1.0\n")
    (thief / "entry_points.txt").write_text("[wasmext.plugins]\nthief = wasmext_plugin_good\n")
    (thief / "RECORD").write_text("thief-1.0.dist-info/METADATA,,\n")
    # An object instead of a folder; a path that climbs out; an id that is not its name.
    _install(site, "wasmext-plugin-obj", "obj", "wasmext_plugin_obj:plugin", "obj")
    climb = site / "climb-1.0.dist-info"
    climb.mkdir()
    (climb / "METADATA").write_text("Metadata-Version: 2.1\nName: climb\nVersion: 1.0\n")
    (climb / "entry_points.txt").write_text("[wasmext.plugins]\nclimb = ../../etc\n")
    (climb / "RECORD").write_text("../../etc/plugin.toml,,\n")
    _install(site, "wasmext-plugin-liar", "liar", "wasmext_plugin_liar", "good")
    # A terminal escape in the entry point's name reaches no message raw.
    _install(site, "wasmext-plugin-esc", "esc\x1b[31m", "wasmext_plugin_esc", "esc")
    found = discover([PACKAGES])
    loaded = [d.manifest.id for d in found if d.manifest is not None]
    assert loaded == ["good", "other"]
    errors = [str(d.error) for d in found if d.error is not None]
    assert len(errors) == 5, errors
    assert any("thief" in e and "not a file of distribution" in e for e in errors)
    assert any("'obj'" in e and "must name a package folder" in e for e in errors)
    assert any("'climb'" in e and "must name a package folder" in e for e in errors)
    assert any("'liar'" in e and "must be the same" in e for e in errors)
    assert not any("\x1b" in e for e in errors)
    with _host(tmp_path, entry_points=True) as host:
        assert set(host.plugins) == {"good", "other"}
        assert host.plugins["good"].plugin.call("on_plain_text", "hi").value == "from a wheel"


def test_a_folder_plugin_wins_over_a_package_of_the_same_id(site: Path, tmp_path: Path) -> None:
    _install(site, "wasmext-plugin-shout", "shout", "wasmext_plugin_shout", "shout")
    workspace = tmp_path / "plugins" / "shout"
    workspace.mkdir(parents=True)
    (workspace / "plugin.toml").write_text('id = "shout"\nversion = "2.0.0"\nabi = 1\n')
    (workspace / "shout.wasm").write_bytes(MODULE)
    with _host(tmp_path, entry_points=True, workspace=tmp_path / "plugins") as host:
        assert host.plugins["shout"].source == "workspace"
        assert any("already used" in str(e) for e in host.load_errors)


def test_uninstall_leaves_a_package_plugin_to_pip(site: Path, tmp_path: Path) -> None:
    folder = _install(site, "wasmext-plugin-shout", "shout", "wasmext_plugin_shout", "shout")
    with _host(tmp_path, entry_points=True) as host, \
            pytest.raises(ConfigError, match="pip uninstall"):
        uninstall(host, "shout")
    assert (folder / "plugin.toml").is_file()
    assert sys.path[0] == str(site)
