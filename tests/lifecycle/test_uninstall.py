"""`wasmext uninstall ID [--purge-state]`: the folder goes, the state of every scope goes
with the flag, the approvals are revoked, and the unregister is logged and counted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from lc_support import write_plugin

from wasmext import Host, load_config
from wasmext.lifecycle.approvals import ApprovalStore, Subject
from wasmext.lifecycle.uninstall import uninstall
from wasmext.state import Scope
from wasmext_cli.main import main


def _setup(tmp_path: Path) -> Path:
    write_plugin(tmp_path / "plugins", "kb", "v1", tools=["find"])
    write_plugin(tmp_path / "plugins", "keep", "v1")
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    with Host(load_config(config)) as host:
        store = host.state_store()
        for pid in ("kb", "keep"):
            store.set(Scope(pid), "g", b"global")
            store.set(Scope(pid, "s1"), "a", b"one")
            store.set(Scope(pid, "s2"), "b", b"two")
    ApprovalStore.in_data_dir(tmp_path / "data").grant("kb", Subject("sha256:" + "0" * 64),
                                                       ["state"], "ann")
    return config


def _unregisters(host: Host, pid: str) -> float:
    text = host.observe.metrics.exposition().decode()
    for line in text.splitlines():
        if line.startswith("extension_registration_total{") and 'action="unregister"' in line \
                and f'extension_id="{pid}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_uninstall_with_purge_leaves_no_state(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    config = _setup(tmp_path)
    with Host(load_config(config)) as host:
        assert "kb__find" in host.tools.tools
        with caplog.at_level(logging.INFO, logger="wasmext.lifecycle"):
            report = uninstall(host, "kb", purge_state=True)
        assert report.was_loaded and report.state_entries == 3 and report.approvals == 1
        assert "kb" not in host.plugins and "kb__find" not in host.tools.tools
        assert not (tmp_path / "plugins" / "kb").exists()
        assert not any(p.name.startswith(".") for p in (tmp_path / "plugins").iterdir())
        assert {r.plugin for r in host.state_store().records()} == {"keep"}
        assert len(host.state_store().records()) == 3  # the other plugin's state is kept
        assert _unregisters(host, "kb") == 1.0
        assert any("plugin kb uninstalled" in r.getMessage() for r in caplog.records)
    assert ApprovalStore.in_data_dir(tmp_path / "data").all() == []


def test_uninstall_from_the_command_line(tmp_path: Path) -> None:
    config = _setup(tmp_path)
    runner = CliRunner()
    kept = runner.invoke(main, ["uninstall", "keep", "--config", str(config)])
    assert kept.exit_code == 0, kept.output
    assert "0 state entries purged" in kept.output
    purged = runner.invoke(main, ["uninstall", "kb", "--purge-state", "--config", str(config)])
    assert purged.exit_code == 0, purged.output
    assert "3 state entries purged" in purged.output
    with Host(load_config(config)) as host:
        assert host.plugins == {}
        assert {r.plugin for r in host.state_store().records()} == {"keep"}
    again = runner.invoke(main, ["uninstall", "kb", "--config", str(config)])
    assert again.exit_code == 1 and "not installed" in again.output


def test_uninstall_a_disabled_plugin_still_counts(tmp_path: Path) -> None:
    config = _setup(tmp_path)
    with Host(load_config(config)) as host:
        host.disable("kb")
        before = _unregisters(host, "kb")
        report = uninstall(host, "kb")
        assert not report.was_loaded and report.folder is not None
        assert _unregisters(host, "kb") == before + 1
