"""Recorded approvals: `wasmext grant` records capabilities against the plugin's current
digest with who and when; they survive a restart, are withheld after the module changes
(also on a live reload), and `wasmext revoke` removes them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lc_support import module, write_plugin

from wasmext import Host, load_config
from wasmext.files import atomic_write
from wasmext.lifecycle.approvals import ApprovalStore, Subject
from wasmext_cli.main import main


def _setup(tmp_path: Path) -> Path:
    write_plugin(tmp_path / "plugins", "kb", "v1")
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    return config


def test_grants_survive_a_restart_and_are_withheld_after_a_binary_change(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = _setup(tmp_path)
    runner = CliRunner()
    granted = runner.invoke(main, ["grant", "kb", "state", "tool:calc__*", "--by", "ann",
                                   "--config", str(config)])
    assert granted.exit_code == 0, granted.output
    approvals = tmp_path / "data" / "approvals.json"
    assert approvals.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in approvals.parent.iterdir() if p.name.startswith(".")] == []
    recorded = ApprovalStore(approvals).all()
    assert {(a.capability, a.by) for a in recorded} == {("state", "ann"), ("tool:calc__*", "ann")}
    assert all(a.at.endswith("Z") and a.digest.startswith("sha256:") for a in recorded)

    for _restart in range(2):
        with Host(load_config(config)) as host:
            assert {"state", "tool:calc__*"} <= host.plugins["kb"].plugin.grants

    listed = runner.invoke(main, ["grants", "--json", "--config", str(config)])
    assert {r["status"] for r in json.loads(listed.output)} == {"active"}

    with Host(load_config(config)) as host:  # a live reload re-checks the digest
        atomic_write(tmp_path / "plugins" / "kb" / "kb.wasm", module("v2"))
        assert host.rescan().reloaded == ["kb"]
        assert "state" not in host.plugins["kb"].plugin.grants
    with caplog.at_level(logging.WARNING, logger="wasmext.approvals"), \
            Host(load_config(config)) as host:  # and so does a restart
        assert host.plugins["kb"].plugin.grants == frozenset()
    assert any("withheld until granted again" in r.getMessage() for r in caplog.records)
    listed = runner.invoke(main, ["grants", "--json", "--config", str(config)])
    assert {r["status"] for r in json.loads(listed.output)} == {"withheld (module changed)"}

    regranted = runner.invoke(main, ["grant", "kb", "state", "--config", str(config)])
    assert regranted.exit_code == 0
    with Host(load_config(config)) as host:
        assert host.plugins["kb"].plugin.grants == frozenset({"state"})  # old digest's gone

    revoked = runner.invoke(main, ["revoke", "kb", "--config", str(config)])
    assert revoked.exit_code == 0 and "revoked 1 approval" in revoked.output
    with Host(load_config(config)) as host:
        assert host.plugins["kb"].plugin.grants == frozenset()


def test_a_damaged_approvals_file_grants_nothing(tmp_path: Path) -> None:
    config = _setup(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "approvals.json").write_text("{not json")
    with Host(load_config(config)) as host:
        assert host.plugins["kb"].plugin.grants == frozenset()


def test_grant_refuses_an_unknown_plugin(tmp_path: Path) -> None:
    config = _setup(tmp_path)
    result = CliRunner().invoke(main, ["grant", "nope", "state", "--config", str(config)])
    assert result.exit_code == 1 and "not installed" in result.output


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSON, st.fixed_dictionaries({"plugins": st.dictionaries(
    st.sampled_from(["kb", "x"]), JSON | st.fixed_dictionaries(
        {"digest": st.just("sha256:" + "0" * 64), "capabilities": JSON}), max_size=2)})))
def test_any_approvals_document_reads_without_raising(tmp_path_factory: pytest.TempPathFactory,
                                                      doc: object) -> None:
    path = tmp_path_factory.mktemp("appr") / "approvals.json"
    path.write_text(json.dumps(doc))
    store = ApprovalStore(path)
    subject = Subject("sha256:" + "0" * 64)
    caps = store.effective("kb", subject)
    assert all(isinstance(c, str) for c in caps)
    for approval in store.all():
        assert isinstance(approval.capability, str) and isinstance(approval.by, str)
    store.revoke("x")
    store.grant("kb", subject, ["state"], "ann")  # a write repairs the entry
    assert store.effective("kb", subject) >= frozenset({"state"})
