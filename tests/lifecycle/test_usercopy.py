"""User copies of a plugin folder (`wasmext.lifecycle.usercopy`): what is refused
(a symlink in the folder, an oversized folder, a bad id, the operator's switch),
that a refused copy leaves nothing behind, and that the copy carries no grant."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from support import Built
from wasmext import ActivationError, Host, Runtime
from wasmext.config import Grant, HostConfig
from wasmext.lifecycle import usercopy


def host_with(built: Built, tmp_path: Path, *, user_extensions: bool = True,
              grants: dict[str, Grant] | None = None) -> Host:
    workspace = tmp_path / "plugins"
    if not workspace.exists():
        shutil.copytree(built["text-tags"], workspace / "text-tags")
    config = HostConfig(data_dir=tmp_path / "data", state_backend="memory",
                        workspace_dir=workspace, user_dir=tmp_path / "user",
                        user_extensions=user_extensions, grants=grants or {})
    return Host(config, runtime=Runtime(cache=False))


def leftovers(tmp_path: Path) -> list[str]:
    user = tmp_path / "user"
    return sorted(os.listdir(user)) if user.exists() else []


def test_a_symlink_anywhere_refuses_the_copy(built: Built, tmp_path: Path) -> None:
    with host_with(built, tmp_path) as host:
        (tmp_path / "secret.txt").write_text("host file")
        os.symlink(tmp_path / "secret.txt", tmp_path / "plugins" / "text-tags" / "src" / "x")
        with pytest.raises(ActivationError, match="not a regular file"):
            usercopy.copy_to_user(host, "wordcount")
        assert leftovers(tmp_path) == []  # nothing half-copied, not even the staging folder
        os.unlink(tmp_path / "plugins" / "text-tags" / "src" / "x")
        assert usercopy.copy_to_user(host, "wordcount")[0] == "text-tags-copy"
    assert leftovers(tmp_path) == ["text-tags-copy"]
    assert not (tmp_path / "user" / "text-tags-copy" / "src" / "x").exists()


def test_an_oversized_folder_is_refused(built: Built, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usercopy, "MAX_FILES", 2)
    with host_with(built, tmp_path) as host, \
            pytest.raises(ActivationError, match="over 2 files"):
        usercopy.copy_to_user(host, "text-tags")
    assert leftovers(tmp_path) == []


def test_ids_and_the_switch(built: Built, tmp_path: Path) -> None:
    with host_with(built, tmp_path) as host:
        for bad in ("Upper", "-x", "a/b", "../../etc", "x" * 65):
            with pytest.raises(ActivationError, match="not a plugin id"):
                usercopy.copy_to_user(host, "wordcount", bad)
        with pytest.raises(ActivationError, match="no loaded plugin"):
            usercopy.copy_to_user(host, "nosuch")
        copy_id, folder = usercopy.copy_to_user(host, "wordcount", "my-counter")
        assert copy_id == "my-counter" and (folder / "my-counter.wasm").is_file()
        report = host.rescan()
        assert "my-counter" in host.plugins, report
        # the first served entry of #wordcount is now the user's copy
        assert host.ordered("output_extension")[0].plugin_id == "my-counter"
    with host_with(built, tmp_path, user_extensions=False) as off:
        assert "my-counter" not in off.plugins
        with pytest.raises(ActivationError, match="switched off"):
            usercopy.copy_to_user(off, "wordcount")


def test_a_copy_carries_no_grant(built: Built, tmp_path: Path) -> None:
    with Runtime(cache=False) as rt:
        digest = rt.load(built["text-tags"]).module.info.digest
    grants = {"text-tags": Grant(f"sha256:{digest}", frozenset({"state"}))}
    with host_with(built, tmp_path, grants=grants) as host:
        assert "state" in host.plugins["text-tags"].plugin.grants
        usercopy.copy_to_user(host, "text-tags")
        host.rescan()
        assert host.plugins["text-tags-copy"].plugin.grants == frozenset()
