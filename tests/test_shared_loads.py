"""Copies of one plugin share what is provably the same, and nothing of their state.

A validated plugin.toml is kept by (path, SHA-256 of its bytes), so loading many
copies validates it once; the compiled module is kept by digest and engine
config. Each copy still gets its own Store, memory, settings values and log.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import wasmtime
from hypothesis import given
from hypothesis import strategies as st

from wasmext import CompileCache, Runtime, UnsafeFolder
from wasmext.errors import ConfigError
from wasmext.manifest import load_folder
from wasmext.sandbox.limits import Limits, effective_limits
from wasmext.testing import guest_wat

TOML = 'id = "twin"\nversion = "1.0.0"\n'


def folder_with(root: Path, toml: str = TOML, value: str = "alive") -> Path:
    folder = root / "twin"
    folder.mkdir(parents=True, exist_ok=True)
    wat = guest_wat(response={"ok": True, "value": value})
    (folder / "twin.wasm").write_bytes(wasmtime.wat2wasm(wat))
    (folder / "plugin.toml").write_text(toml)
    return folder


def test_copies_share_manifest_and_code_but_not_instances(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    with Runtime(cache=CompileCache(tmp_path / "cache", tmp_path / "key")) as rt:
        a = rt.load(folder, plugin_id="copy-a")
        b = rt.load(folder, plugin_id="copy-b")
        assert load_folder(folder) is load_folder(folder)  # validated once
        assert a.module.module is b.module.module and a.module.pre is b.module.pre
        ia, ib = a._borrow(), b._borrow()
        assert ia.store is not ib.store
        assert ia.memory.write(100, b"only-a")
        assert ib.memory.read(100, 6) != b"only-a"
        assert a.log is not b.log and a.settings is not b.settings
        a._release(ia)
        b._release(ib)
        assert a.call("test", None).value == b.call("test", None).value == "alive"


def test_an_edited_manifest_is_never_served_from_memory(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    toml = folder / "plugin.toml"
    first = load_folder(folder)
    stamp = toml.stat()
    toml.write_text(TOML.replace("1.0.0", "1.0.1"))  # same size
    os.utime(toml, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # and the same mtime
    assert toml.stat().st_size == stamp.st_size
    again = load_folder(folder)
    assert (first.version, again.version) == ("1.0.0", "1.0.1")
    with Runtime(cache=False) as rt:
        assert rt.load(folder).describe()["id"] == "twin"
        assert load_folder(folder).version == "1.0.1"


def test_same_bytes_at_another_path_are_validated_for_that_path(tmp_path: Path) -> None:
    one = load_folder(folder_with(tmp_path / "one"))
    two = load_folder(folder_with(tmp_path / "two"))
    assert one is not two
    assert one.wasm_path.parent == tmp_path / "one" / "twin"
    assert two.wasm_path.parent == tmp_path / "two" / "twin"


def test_a_manifest_reads_only_the_environment_the_operator_allowed_and_again_each_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = folder_with(tmp_path, TOML + '[mcp.servers.tool]\ncommand = "${TWIN_CMD}"\n')
    monkeypatch.setenv("TWIN_CMD", "first")
    manifest = load_folder(folder)
    assert manifest.mcp_servers[0].command == "${TWIN_CMD}"  # alone: no host environment
    with pytest.raises(ConfigError, match="needs a command"):  # not allowed: unset
        manifest.resolve_mcp({})
    assert manifest.resolve_mcp({"TWIN_CMD": "first"}).mcp_servers[0].command == "first"
    monkeypatch.setenv("TWIN_CMD", "second")
    again = load_folder(folder).resolve_mcp({"TWIN_CMD": "second"})
    assert again.mcp_servers[0].command == "second"


def test_shared_manifest_values_cannot_leak_between_copies(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, TOML + '[limits]\ntimeout_ms = 500\n'
                         '[settings.words]\ndefault = ["a", "b"]\n')
    manifest = load_folder(folder)
    with pytest.raises(TypeError):
        manifest.limits["timeout_ms"] = 10**6  # type: ignore[index]
    with Runtime(cache=False) as rt:
        a = rt.load(folder, plugin_id="copy-a")
        b = rt.load(folder, plugin_id="copy-b")
        a.settings["words"].append("only-a")
        assert b.settings["words"] == ["a", "b"]
        assert load_folder(folder).settings[0].default == ["a", "b"]
        assert a.limits.timeout_ms == b.limits.timeout_ms == 500


def test_symlinked_module_is_refused_even_after_a_clean_load(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    load_folder(folder)  # remembered while clean
    wasm = folder / "twin.wasm"
    outside = tmp_path / "outside.wasm"
    wasm.rename(outside)
    wasm.symlink_to(outside)
    with pytest.raises(UnsafeFolder, match="outside its plugin folder"):
        load_folder(folder)
    wasm.unlink()
    wasm.symlink_to("twin-real.wasm")  # a symlink that stays inside is fine
    outside.rename(folder / "twin-real.wasm")
    with Runtime(cache=False) as rt:
        assert rt.load(folder).call("test", None).value == "alive"


FIELDS = [f.name for f in dataclasses.fields(Limits)]
limits = st.builds(Limits, **{name: st.integers(1 << 16, 1 << 31) for name in FIELDS})


@given(limits, limits)
def test_limits_shortcuts_match_the_plain_rule(own: Limits, policy: Limits) -> None:
    assert own.as_dict() == dataclasses.asdict(own)
    capped = own.capped_by(policy)
    assert capped.as_dict() == {n: min(getattr(own, n), getattr(policy, n)) for n in FIELDS}
    assert effective_limits(own, None, None, policy) == capped
