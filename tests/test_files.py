"""`wasmext.files`: a file is replaced whole or not at all (kill -9 loops over the
CLI's export are in tests/state/test_state_cli_crash.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext.files import atomic_open, atomic_write


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


@settings(max_examples=50, deadline=None)
@given(old=st.binary(max_size=4096), new=st.one_of(st.binary(max_size=70_000), st.text()))
def test_replaces_whole(tmp_path_factory: pytest.TempPathFactory, old: bytes,
                        new: bytes | str) -> None:
    folder = tmp_path_factory.mktemp("w")
    target = folder / "backup.bin"
    atomic_write(target, old)
    atomic_write(target, new)
    assert target.read_bytes() == (new.encode("utf-8") if isinstance(new, str) else new)
    assert leftovers(folder) == []


@settings(max_examples=30, deadline=None)
@given(old=st.binary(min_size=1, max_size=4096), part=st.binary(max_size=8192))
def test_failure_mid_write_leaves_the_old_file(tmp_path_factory: pytest.TempPathFactory,
                                               old: bytes, part: bytes) -> None:
    folder = tmp_path_factory.mktemp("f")
    target = folder / "state.json"
    target.write_bytes(old)

    def write_then_fail() -> None:
        with atomic_open(target) as fh:
            fh.write(part)
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        write_then_fail()
    assert target.read_bytes() == old
    assert leftovers(folder) == []


def test_failing_fsync_or_rename_leaves_the_old_file(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "plugins.json"
    target.write_text("old")
    for name in ("fsync", "replace"):
        with monkeypatch.context() as m:
            def boom(*args: object) -> None:
                raise OSError(28, "No space left on device")
            m.setattr(os, name, boom)
            with pytest.raises(OSError, match="No space"):
                atomic_write(target, "new" * 1000)
        assert target.read_text() == "old"
        assert leftovers(tmp_path) == []


def test_new_file_mode_and_missing_folder(tmp_path: Path) -> None:
    atomic_write(tmp_path / "key", b"k" * 32, mode=0o600)
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600
    atomic_write(tmp_path / "export", "x")
    assert stat.S_IMODE((tmp_path / "export").stat().st_mode) == 0o644
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "nope" / "file", b"")
    assert not (tmp_path / "nope").exists()
