"""A config or manifest with several problems reports them all at once, each naming the
file and the field, with type errors said as types ("must be an integer")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext import ConfigError, load_config
from wasmext.errors import ManifestError
from wasmext.manifest import MANIFEST_TYPES, load_folder, type_problems


def test_every_type_problem_of_a_manifest_at_once(tmp_path: Path) -> None:
    (tmp_path / "plugin.toml").write_text(
        'id = "demo"\nversion = "1.0.0"\nabi = "1"\npriority = "high"\n'
        '[build]\nlang = 3\nsources = ["a.c"]\n')
    with pytest.raises(ManifestError) as caught:
        load_folder(tmp_path)
    text = caught.value.describe()
    assert str(tmp_path / "plugin.toml") in text
    for fld in ("'abi': must be an integer", "'priority': must be an integer",
                "'build.lang': must be a string"):
        assert fld in text, fld
    assert "SemVer" not in text and "ABI" not in text  # a type error, not a version message


def test_every_type_problem_of_a_config_at_once(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text('[host]\nhooks = "yes"\ndefault_timeout_ms = "soon"\n'
                    '[plugins]\nenabled = "pii-mask"\n[plugin.demo]\npriority = "first"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = caught.value.describe()
    assert text.count("wasmext.toml") == 1
    for fld in ("'host.hooks': must be true or false",
                "'host.default_timeout_ms': must be an integer",
                "'plugins.enabled': must be an array",
                "'plugin.demo.priority': must be an integer"):
        assert fld in text, fld


toml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8)


@given(st.dictionaries(st.sampled_from(sorted(k.rstrip("!") for k in MANIFEST_TYPES)),
                       toml_values, max_size=6))
def test_type_problems_name_only_fields_of_the_input(data: dict[str, Any]) -> None:
    for fld, word in type_problems(MANIFEST_TYPES, data):
        assert fld.split(".")[0] in data or word == "is required"
        assert word and "\n" not in word
