"""plugin.toml validation: every bad field is named; nothing else escapes."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext import ConfigError, ManifestError
from wasmext.manifest import load_manifest, parse_manifest
from wasmext.runtime import resolve_settings

P = Path("plugins/x/plugin.toml")
GOOD = {"id": "pii-mask", "version": "1.2.3-rc.1+build.5", "priority": 70,
        "settings": {"mask_email": {"default": True, "description": "mask e-mails"}},
        "build": {"lang": "c", "sources": ["src/a.c"]}}


def test_good_manifest() -> None:
    m = parse_manifest(GOOD, P)
    assert (m.id, m.version, m.priority, m.wasm_name) == ("pii-mask", "1.2.3-rc.1+build.5", 70,
                                                          "pii-mask.wasm")
    assert m.settings[0].default is True
    assert m.build is not None and m.build.sources == ("src/a.c",)


@pytest.mark.parametrize(("change", "field"), [
    ({"id": "Bad_Id"}, "id"), ({"id": "-x"}, "id"), ({"id": "a" * 65}, "id"),
    ({"id": "../etc"}, "id"), ({"version": "1.2"}, "version"), ({"version": 1}, "version"),
    ({"priority": 101}, "priority"), ({"priority": True}, "priority"), ({"abi": 2}, "abi"),
    ({"limits": {"fuel_per_call": -1}}, "limits"), ({"limits": {"nope": 1}}, "limits"),
    ({"capabilities": "state"}, "capabilities"), ({"wasm": "../x.wasm"}, "wasm"),
    ({"settings": {"bad name": {}}}, "settings.bad name"),
    ({"settings": {"a": {"sensitive": "yes"}}}, "settings.a.sensitive"),
    ({"build": {"lang": "c", "sources": ["../../etc/passwd"]}}, "build.sources"),
    ({"surprise": 1}, "surprise"),
])
def test_bad_fields_are_named(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({**GOOD, **change}, P)
    assert info.value.field == field
    assert str(P) in str(info.value)


toml_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.floats()
toml_values = st.recursive(toml_scalars, lambda c: st.lists(c, max_size=3)
                           | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=10)


@given(st.dictionaries(st.sampled_from(["id", "version", "description", "abi", "priority",
                                        "wasm", "limits", "capabilities", "settings", "build",
                                        "other"]), toml_values))
def test_random_manifests_validate_or_raise_manifest_error(data: dict[str, Any]) -> None:
    with contextlib.suppress(ManifestError):
        parse_manifest(data, P)


def test_unreadable_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "missing.toml")
    bad = tmp_path / "plugin.toml"
    bad.write_text("id = [unclosed")
    with pytest.raises(ManifestError, match="not valid TOML"):
        load_manifest(bad)


def test_setting_precedence_and_required() -> None:
    m = parse_manifest({"id": "p", "version": "1.0.0", "settings": {
        "a": {"default": 1, "env": "P_A"}, "b": {"required": True, "env": "P_B"}}}, P)
    assert resolve_settings(m, {"b": 2}, {}) == {"a": 1, "b": 2}
    assert resolve_settings(m, {}, {"P_A": "7", "P_B": "x"}) == {"a": 7, "b": "x"}
    assert resolve_settings(m, {"a": 3}, {"P_A": "7", "P_B": "x"})["a"] == 3
    with pytest.raises(ConfigError, match=r"required setting 'b'.*\$P_B"):
        resolve_settings(m, {}, {})
    with pytest.raises(ConfigError, match="unknown setting 'c'"):
        resolve_settings(m, {"b": 1, "c": 1}, {})


def test_environment_values_take_the_default_type() -> None:
    m = parse_manifest({"id": "p", "version": "1.0.0", "settings": {
        "on": {"default": False, "env": "P_ON"}, "n": {"default": 3, "env": "P_N"},
        "f": {"default": 0.5, "env": "P_F"}, "s": {"default": "x", "env": "P_S"}}}, P)
    env = {"P_ON": "Yes", "P_N": "42", "P_F": "2.5", "P_S": "007"}
    assert resolve_settings(m, {}, env) == {"on": True, "n": 42, "f": 2.5, "s": "007"}
    with pytest.raises(ConfigError, match=r"setting 'on' from the environment"):
        resolve_settings(m, {}, {"P_ON": "maybe"})
    with pytest.raises(ConfigError, match="setting 'n'"):
        resolve_settings(m, {}, {"P_N": "many"})
