"""A folder grant on a component: wasmtime's WASI p2 preopen at the same guest path
as for core modules (`/<folder name>`), read-only unless granted `rw`, confined to
the folder (`..`, absolute paths and symlinks out of it fail in the guest), and
read-only even when granted `rw` (the [fs] quota cannot bound a component's writes)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from support import Built
from wasmext import PluginError, Runtime

BOUND_S = 10.0
SECRET = b"S-outside-secret"


def test_a_component_reads_its_granted_folder_and_nothing_else(
        components: Built, crt: Runtime, tmp_path: Path) -> None:
    box = tmp_path / "box"
    box.mkdir()
    (box / "a.txt").write_bytes(b"I-inside-a")
    (tmp_path / "canary.txt").write_bytes(SECRET)
    (box / "link").symlink_to(tmp_path / "canary.txt")
    plugin = crt.load(components["hostile-python"], plugin_id="fs-reader",
                      grants=frozenset([f"fs:{box}"]))
    started = time.monotonic()
    assert plugin.call("read_file", "/box/a.txt").value == b"I-inside-a"
    assert sorted(plugin.call("list_dir", "/box").value) == ["a.txt", "link"]
    for path in ("/box/../canary.txt", str(tmp_path / "canary.txt"), "/box/link",
                 "/etc/passwd"):
        with pytest.raises(PluginError) as info:
            plugin.call("read_file", path)
        assert SECRET.decode() not in info.value.message
    assert time.monotonic() - started < BOUND_S
    assert (tmp_path / "canary.txt").read_bytes() == SECRET
    assert plugin.call("echo", "alive").value == "alive"


def test_an_rw_grant_is_read_only_for_a_component(components: Built, crt: Runtime,
                                                  tmp_path: Path) -> None:
    box = tmp_path / "box"
    box.mkdir()
    plugin = crt.load(components["hostile-python"], plugin_id="fs-writer",
                      grants=frozenset([f"fs:{box}:rw"]))
    with pytest.raises(PluginError):
        plugin.call("write_file", {"path": "/box/new.txt", "text": "x" * 100})
    assert list(box.iterdir()) == []
    assert any("read-only for a component" in ln.text for ln in plugin.log.lines)
    assert plugin.call("echo", "alive").value == "alive"


@pytest.mark.slow  # inspect compiles the component (tens of seconds without a cache)
def test_inspect_of_a_component_asking_for_a_folder_says_it_is_read_only(
        components: Built, tmp_path: Path) -> None:
    from wasmext_cli.main import main

    built = components["hostile-python"]
    folder = tmp_path / "asks-fs"
    folder.mkdir()
    shutil.copy(built / "python-hostile.wasm", folder / "asks-fs.wasm")
    (folder / "plugin.toml").write_text('id = "asks-fs"\nversion = "0.1.0"\n'
                                        'wasm = "asks-fs.wasm"\ncapabilities = ["fs"]\n')
    shown = CliRunner().invoke(main, ["inspect", str(folder)])
    assert shown.exit_code == 0, shown.output
    assert "a component sees a granted folder read-only, even granted rw" in shown.output
