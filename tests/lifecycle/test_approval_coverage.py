"""Issue 24, class 2: an approval covers everything that decides what the plugin can do.

A recorded approval pins the module, plugin.toml and the files the manifest makes the
host run (a stdio MCP server's script); changing any of them withholds the grants until
an operator grants again, and `wasmext grants` names what changed. A signed folder runs
the module bytes that were verified; an older bundle does not replace a newer one unless
the operator allows it; `install --replace` killed at any moment leaves a plugin there.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from click.testing import CliRunner
from lc_support import ROOT, module, write_plugin

from wasmext import Host, PluginError, load_config
from wasmext.errors import BundleDowngrade
from wasmext.files import atomic_write
from wasmext.lifecycle import bundle as bundle_mod
from wasmext.lifecycle.bundle import install, pack, sign_bundle
from wasmext.lifecycle.signing import generate_key
from wasmext.manifest import load_folder, version_key
from wasmext.testing import DATA_AT, guest_wat
from wasmext_cli.main import main

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
SECRET = "kb-secret-value-424242"
TOML = """id = "kb"
version = "0.1.0"
[settings.token]
env = "KB_TOKEN"
sensitive = true
[mcp.servers.side]
command = "python"
args = ["server.py"]
"""


def secret_wasm() -> bytes:
    """A guest whose `test` hook answers what secret.get gives for "token"."""
    raw = msgpack.packb({"op": "secret.get", "key": "token"})
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                    imports=HOST_CALL, data=raw, memory_pages=4,
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 1})
    return bytes(wasmtime.wat2wasm(wat))


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "plugins" / "kb"
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text(TOML)
    (folder / "kb.wasm").write_bytes(secret_wasm())
    (folder / "server.py").write_text("print('side server v1')\n")
    write_plugin(tmp_path / "plugins", "bystander", "v1")
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
                      '[plugin.kb]\nenv = ["KB_TOKEN"]\n')
    return folder, config


def _grants(config: Path) -> list[dict[str, Any]]:
    listed = CliRunner().invoke(main, ["grants", "--json", "--config", str(config)])
    assert listed.exit_code == 0, listed.output
    rows: list[dict[str, Any]] = json.loads(listed.stdout)
    assert SECRET not in listed.output
    return rows


def _withheld(config: Path, changed: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """The grants are withheld at load (within a time bound), the secret never reaches
    the guest, the log and `wasmext grants` say what changed, and the host serves on."""
    caplog.clear()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING), Host(load_config(config)) as host:
        assert time.monotonic() - started < 10
        kb = host.plugins["kb"].plugin
        assert kb.grants == frozenset()
        with pytest.raises(PluginError) as info:
            kb.call("test")
        assert info.value.code == "denied" and SECRET not in info.value.message
        instance = kb._idle[0]  # type: ignore[union-attr]
        memory = instance.memory.read(0, instance.memory.size())
        assert memory is not None and SECRET.encode() not in memory
        assert host.plugins["bystander"].plugin.call("test").value == "v1"
    assert f"kb changed ({', '.join(changed)})" in caplog.text and SECRET not in caplog.text
    rows = _grants(config)
    assert {r["status"] for r in rows} == {f"withheld ({', '.join(changed)} changed)"}
    assert all(r["changed"] == changed for r in rows)


def _active(config: Path) -> None:
    with Host(load_config(config)) as host:
        assert host.plugins["kb"].plugin.call("test").value == SECRET
    assert {r["status"] for r in _grants(config)} == {"active"}


def test_an_approval_is_withheld_when_the_manifest_or_a_file_it_runs_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("KB_TOKEN", SECRET)
    folder, config = _setup(tmp_path)
    granted = CliRunner().invoke(main, ["grant", "kb", "secrets", "--by", "ann",
                                        "--config", str(config)])
    assert granted.exit_code == 0, granted.output
    record = json.loads((tmp_path / "data" / "approvals.json").read_text())["plugins"]["kb"]
    assert record["manifest"].startswith("sha256:") and set(record["files"]) == {"server.py"}
    _active(config)

    # The manifest changes what the plugin is (here: a setting pointed at another variable).
    (folder / "plugin.toml").write_text(TOML.replace('env = "KB_TOKEN"', 'env = "KB_OTHER"'))
    _withheld(config, ["plugin.toml"], caplog)
    (folder / "plugin.toml").write_text(TOML)
    _active(config)  # the very bytes that were approved: covered again

    # A file the manifest makes the host execute changes.
    (folder / "server.py").write_text("print('side server v2')\n")
    _withheld(config, ["server.py"], caplog)
    assert CliRunner().invoke(main, ["grant", "kb", "secrets", "--config",
                                     str(config)]).exit_code == 0
    _active(config)

    # A running host notices too: a rescan reloads it and checks its grants again.
    with Host(load_config(config)) as host:
        assert host.rescan().changed is False  # nothing changed: nothing reloads
        assert host.plugins["kb"].plugin.call("test").value == SECRET
        (folder / "server.py").write_text("print('side server v3')\n")
        assert host.rescan().reloaded == ["kb"]
        assert host.plugins["kb"].plugin.grants == frozenset()
        assert host.rescan().changed is False
    (folder / "server.py").write_text("print('side server v2')\n")

    # A record written before manifests were pinned covers no manifest.
    approvals = tmp_path / "data" / "approvals.json"
    doc = json.loads(approvals.read_text())
    del doc["plugins"]["kb"]["manifest"], doc["plugins"]["kb"]["files"]
    atomic_write(approvals, json.dumps(doc))
    _withheld(config, ["plugin.toml", "server.py"], caplog)


def test_a_config_grant_can_pin_the_manifest_too(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_TOKEN", SECRET)
    folder, config = _setup(tmp_path)
    shown = CliRunner().invoke(main, ["inspect", str(folder), "--json"])
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.stdout)  # the refused-variable warning goes to stderr
    digest, manifest = info["digest"], info["manifest_digest"]
    assert manifest == load_folder(folder).source_digest
    config.write_text(config.read_text() + f'[grants.kb]\ndigest = "{digest}"\n'
                      f'manifest = "{manifest}"\ncapabilities = ["secrets"]\n')
    with Host(load_config(config)) as host:
        assert host.plugins["kb"].plugin.call("test").value == SECRET
    (folder / "plugin.toml").write_text(TOML + "# edited\n")
    with Host(load_config(config)) as host:
        assert host.plugins["kb"].plugin.grants == frozenset()
        assert host.plugins["bystander"].plugin.call("test").value == "v1"


def _versioned_bundle(tmp_path: Path, version: str, answer: str) -> Path:
    src = tmp_path / f"src-{version}"
    folder = write_plugin(src, "kb", answer)
    toml = folder / "plugin.toml"
    toml.write_text(toml.read_text().replace('version = "0.1.0"', f'version = "{version}"'))
    out = tmp_path / f"kb-{version}.wxb"
    pack(folder, out)
    return out


def test_an_older_bundle_does_not_replace_a_newer_one_unless_allowed(tmp_path: Path) -> None:
    newer = _versioned_bundle(tmp_path, "0.2.0", "v2")
    older = _versioned_bundle(tmp_path, "0.2.0-rc.1", "v1")
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    runner = CliRunner()
    assert runner.invoke(main, ["install", str(newer), "--config", str(config)]).exit_code == 0
    started = time.monotonic()
    refused = runner.invoke(main, ["install", str(older), "--replace", "--config", str(config)])
    assert time.monotonic() - started < 5
    assert refused.exit_code != 0
    assert "0.2.0-rc.1 is older than the installed 0.2.0" in refused.output
    assert "--allow-downgrade" in refused.output
    with pytest.raises(BundleDowngrade):
        install(older, tmp_path / "plugins", replace=True)
    with Host(load_config(config)) as host:
        assert host.plugins["kb"].plugin.call("test").value == "v2"
    allowed = runner.invoke(main, ["install", str(older), "--replace", "--allow-downgrade",
                                   "--config", str(config)])
    assert allowed.exit_code == 0, allowed.output
    with Host(load_config(config)) as host:
        assert host.plugins["kb"].plugin.call("test").value == "v1"


@pytest.mark.parametrize("semver", [("1.0.0-alpha", "1.0.0-alpha.1"), ("1.0.0-alpha.1",
                                    "1.0.0-alpha.beta"), ("1.0.0-beta.2", "1.0.0-beta.11"),
                                    ("1.0.0-rc.1", "1.0.0"), ("1.9.0", "1.10.0")])
def test_versions_compare_by_semver_precedence(semver: tuple[str, str]) -> None:
    lower, higher = semver
    assert version_key(lower) < version_key(higher)


INSTALL_LOOP = """
import sys
from pathlib import Path
from wasmext.lifecycle.bundle import install
bundles, dest = [Path(p) for p in sys.argv[1:3]], Path(sys.argv[3])
n = int(sys.argv[4])
install(bundles[n % 2], dest, replace=True, allow_downgrade=True)  # imports done
n += 1
print("ready", flush=True)
while True:
    install(bundles[n % 2], dest, replace=True, allow_downgrade=True)
    n += 1
"""


@pytest.mark.slow  # a kill loop
def test_install_replace_killed_at_any_moment_leaves_a_plugin_installed(tmp_path: Path
                                                                         ) -> None:
    bundles = [_versioned_bundle(tmp_path, "0.1.0", "v1"),
               _versioned_bundle(tmp_path, "0.2.0", "v2")]
    dest = tmp_path / "plugins"
    install(bundles[0], dest)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    rng = random.Random(24)
    seen = set()
    for n in range(12):
        proc = subprocess.Popen([sys.executable, "-c", INSTALL_LOOP, *map(str, bundles),
                                 str(dest), str(n)], env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.1))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        manifest = load_folder(dest / "kb")  # old or new, complete, never none
        assert manifest.version in ("0.1.0", "0.2.0")
        assert manifest.wasm_path.read_bytes() == module("v1" if manifest.version == "0.1.0"
                                                         else "v2")
        seen.add(manifest.version)
        assert [p.name for p in dest.iterdir() if not p.name.startswith(".")] == ["kb"]
    assert seen == {"0.1.0", "0.2.0"}  # killed before and after swaps, never in between
    left = [p for p in dest.iterdir() if p.name.startswith(".wxb-install-")]
    for p in left:  # what the killed installs left: removed once an hour old
        os.utime(p, (time.time() - 7200, time.time() - 7200))
    install(bundles[1], dest, replace=True)
    assert [p.name for p in dest.iterdir()] == ["kb"]
    with Host(load_config_for(tmp_path, dest)) as host:
        assert host.plugins["kb"].plugin.call("test").value in ("v1", "v2")


def load_config_for(tmp_path: Path, dest: Path) -> Any:
    config = tmp_path / "serve.toml"
    config.write_text(f'[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "{dest}"\n')
    return load_config(config)


@pytest.mark.parametrize("step", ["_write_new", "fsync_dir", "load_folder", "replace_dir"])
def test_install_replace_failing_at_any_step_keeps_the_old_plugin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    old = _versioned_bundle(tmp_path, "0.1.0", "v1")
    new = _versioned_bundle(tmp_path, "0.2.0", "v2")
    dest = tmp_path / "plugins"
    install(old, dest)

    def crash(*_args: Any, **_kw: Any) -> Any:
        raise OSError(5, "injected failure")

    monkeypatch.setattr(bundle_mod, step, crash)
    with pytest.raises(OSError, match="injected failure"):
        install(new, dest, replace=True)
    assert load_folder(dest / "kb").version == "0.1.0"
    assert sorted(p.name for p in dest.iterdir()) == ["kb"]  # no staging left behind
    monkeypatch.undo()
    install(new, dest, replace=True)
    assert load_folder(dest / "kb").version == "0.2.0"


def test_a_signed_folder_compiles_the_bytes_that_were_verified(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = generate_key(tmp_path / "k.pem")
    bundle = _versioned_bundle(tmp_path, "0.1.0", "v1")
    sign_bundle(bundle, tmp_path / "k.pem")
    folder = install(bundle, tmp_path / "plugins", trusted=(key,), require_signature=True)
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
                      f'[trust]\nrequire_signature = true\nkeys = ["{key}"]\n')
    verify = bundle_mod.verify_folder

    def verify_then_swap(*args: Any) -> Any:  # the module changes right after the check
        checked = verify(*args)
        atomic_write(folder / "kb.wasm", module("evil"))
        return checked

    monkeypatch.setattr(bundle_mod, "verify_folder", verify_then_swap)
    with Host(load_config(config)) as host:
        assert host.load_errors == []
        assert host.plugins["kb"].plugin.call("test").value == "v1"  # what was verified
