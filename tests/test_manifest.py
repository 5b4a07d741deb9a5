"""plugin.toml validation: every bad field is named; nothing else escapes."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext import ConfigError, ManifestError
from wasmext.manifest import load_folder, load_manifest, parse_manifest
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


_TOML_SCALARS = st.one_of(st.text(max_size=5), st.integers(-3, 3), st.booleans(),
                          st.floats(allow_nan=False, width=32))
_TOML_VALUES = st.recursive(_TOML_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)


def _typed(kind: Any) -> st.SearchStrategy[Any]:
    """Values of a MANIFEST_TYPES kind, now and then one of any other TOML type."""
    from typing import get_args, get_origin

    if isinstance(kind, dict):
        return st.fixed_dictionaries(
            {k.rstrip("!"): _typed(v) for k, v in kind.items() if k.endswith("!")},
            optional={k: _typed(v) for k, v in kind.items() if not k.endswith("!")})
    origin, args = get_origin(kind), get_args(kind)
    if kind is str:
        right: st.SearchStrategy[Any] = st.text(max_size=5)
    elif kind is int:
        right = st.integers(-3, 3)
    elif origin is list:
        right = st.lists(_typed(args[0]), max_size=3)
    elif origin is dict:  # a TOML table's keys are strings, whatever its values are
        right = st.dictionaries(st.text(max_size=5), _typed(args[1]), max_size=3)
    else:
        right = _TOML_VALUES
    return st.integers(0, 15).flatmap(lambda n: right if n else _TOML_VALUES)


def _manifest_like() -> st.SearchStrategy[dict[str, Any]]:
    """Tables with the manifest's own keys (and nested [build] keys), mostly well typed."""
    from wasmext.manifest import MANIFEST_TYPES

    return _typed(dict(MANIFEST_TYPES))


@settings(deadline=None)  # the full check builds its pydantic model on first use
@given(_manifest_like())
def test_the_quick_type_check_agrees_with_the_full_one(data: dict[str, Any]) -> None:
    """A manifest the quick check passes (loading then needs no pydantic) has no problem the
    full check would name, and one it refuses has at least one."""
    from wasmext.manifest import MANIFEST_TYPES, _all_conform, _model_problems

    quick = _all_conform(MANIFEST_TYPES, data)
    full = _model_problems(MANIFEST_TYPES, data, "")
    if quick is not None:
        assert quick == (full == []), (quick, full)


def test_a_folder_without_plugin_toml_is_said_to_be_no_plugin_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`wasmext call .` or `inspect .` in the wrong folder said "manifest: plugin.toml:
    cannot read: No such file or directory", naming neither the folder nor the fix."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ManifestError) as caught:
        load_folder(Path("."))
    assert caught.value.message == (f"{tmp_path} has no plugin.toml, so it is no plugin "
                                    "folder (`wasmext new NAME --lang LANG` makes one)")


@pytest.mark.parametrize(("asked", "meant"), [("stat", "state"), ("secret", "secrets"),
                                              ("htttp", "http"), ("toolz:calc", "tool:calc")])
def test_a_capability_one_typo_from_a_known_one_is_refused(asked: str, meant: str) -> None:
    """`capabilities = ["stat"]` loaded, `inspect` showed `asks for stat`, and the plugin
    asked for nothing any grant gives: the author learnt of it from a denial at run time."""
    with pytest.raises(ManifestError) as info:
        parse_manifest({**GOOD, "capabilities": ["state", asked]}, P)
    assert info.value.field == "capabilities[1]"
    assert f"did you mean {meant!r}?" in str(info.value)


def test_a_manifest_asks_in_general_terms_or_for_an_embedders_capability() -> None:
    asked = ["state", "fs", "tool", "emit", "http:api.example.com", "mcp-server:side",
             "lookup", "billing:eu"]
    assert parse_manifest({**GOOD, "capabilities": asked}, P).capabilities == tuple(asked)
