"""The Zig guest SDK: its native `zig test` suites, and its plugins end to end.

The Zig unit tests cover the MessagePack reader and writer against
abi/vectors/*.json plus hostile input (guest-sdks/zig/src/msgpack_test.zig),
and the text rules of plugins/normalize-text (src/normalize.zig). They run on
the native target, in Debug mode, so every slice access is bounds-checked.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZIG_SDK = ROOT / "guest-sdks" / "zig"
HELLO = ZIG_SDK / "examples" / "hello"
NORMALIZE = ROOT / "plugins" / "normalize-text"

NO_ZIG = "the ziglang toolchain is not installed (pip install 'wasmext[build]')"

pytestmark = [
    pytest.mark.toolchain,
    pytest.mark.skipif(importlib.util.find_spec("ziglang") is None, reason=NO_ZIG),
]


def zig_test(source: Path, cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run `zig test` on `source`; fail with zig's own output when a test fails."""
    run_env = {**os.environ, **(env or {})}
    run_env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(Path.home() / ".cache" / "wasmext-zig"))
    proc = subprocess.run([sys.executable, "-m", "ziglang", "test", str(source)], cwd=cwd,
                          env=run_env, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "passed" in output, output


def test_msgpack_unit_tests() -> None:
    zig_test(ZIG_SDK / "src" / "msgpack_test.zig", ZIG_SDK,
             {"WASMEXT_VECTORS": str(ROOT / "abi" / "vectors")})


def test_normalize_text_unit_tests() -> None:
    zig_test(NORMALIZE / "src" / "normalize.zig", NORMALIZE)


@pytest.fixture(scope="module")
def built_zig() -> None:
    from wasmext_cli.build import build_plugin

    for folder in (HELLO, NORMALIZE):
        build_plugin(folder)


@pytest.fixture
def rt(runtime: Any, built_zig: None) -> Any:
    return runtime


def test_hello_greets_with_setting_or_default(rt: Any) -> None:
    hello = rt.load(HELLO)
    assert hello.call("greet", "Ada").value == "Hello, Ada!"
    howdy = rt.load(HELLO, settings={"greeting": "Howdy"})
    assert howdy.call("greet", "Bob").value == "Howdy, Bob!"


def test_a_static_registration_is_shared_by_copies(rt: Any) -> None:
    first = rt.load(HELLO, plugin_id="hello-a")
    copy = rt.load(HELLO, plugin_id="hello-b")
    assert first.registration.shareable and len(copy._idle) == 0  # starts at its first call
    assert copy.call("greet", "Ada").value == "Hello, Ada!"
    assert rt.load(NORMALIZE, plugin_id="normalize-a").registration.shareable


def test_hello_refuses_non_string_data(rt: Any) -> None:
    from wasmext.errors import PluginError

    with pytest.raises(PluginError) as err:
        rt.load(HELLO).call("greet", 42)
    assert err.value.code == "invalid"


@pytest.mark.parametrize(("settings", "text", "want"), [
    ({}, "  many   spaces\there \n", "many spaces here"),
    ({"lowercase": True}, "ÀÉÎ ΣΟΦΙΑ Привет İ", "àéî σοφια привет i"),
    ({"emoji": "strip"}, "ship it 🚀 👍🏽 now 🇫🇷", "ship it now"),
    ({"emoji": "replace", "emoji_replacement": "<e>"}, "hi 👨‍👩‍👧!", "hi <e>!"),
    ({"whitespace": False}, " a  b ", None),
])
def test_normalize_text(rt: Any, settings: dict[str, Any], text: str, want: str | None) -> None:
    plugin = rt.load(NORMALIZE, settings=settings)
    for hook in ("on_plain_text", "on_llm_output"):
        result = plugin.call(hook, text)
        assert result.changed is (want is not None)
        assert result.value == (text if want is None else want)


@pytest.mark.parametrize(("settings", "name"), [
    ({"lowercase": "sometimes"}, "lowercase"),
    ({"whitespace": 1}, "whitespace"),
    ({"emoji_replacement": 7}, "emoji_replacement"),
])
def test_a_setting_of_the_wrong_type_is_refused_at_load(rt: Any, settings: dict[str, Any],
                                                          name: str) -> None:
    from wasmext.errors import ConfigError

    # The host checks values against the manifest's declared types before the guest runs.
    with pytest.raises(ConfigError, match=f"setting '{name}'"):
        rt.load(NORMALIZE, settings=settings)


def test_a_setting_of_the_right_type_but_no_valid_value_is_the_plugins_error(rt: Any) -> None:
    from wasmext.errors import PluginError

    with pytest.raises(PluginError) as err:
        rt.load(NORMALIZE, settings={"emoji": "name"}).call("on_plain_text", "x")
    assert err.value.code == "invalid"
    assert "'emoji'" in str(err.value)


def test_normalize_text_large_input_fits_default_limits(rt: Any) -> None:
    text = "The quick brown Fox jumps over  the lazy dog. " * 20_000  # 920,000 bytes
    result = rt.load(NORMALIZE, settings={"lowercase": True}).call("on_plain_text", text)
    assert result.value == " ".join(text.lower().split())


def test_zig_builds_are_reproducible(tmp_path: Path) -> None:
    from wasmext_cli.build import build_plugin

    first = build_plugin(NORMALIZE, out_dir=tmp_path / "a").wasm.read_bytes()
    second = build_plugin(NORMALIZE, out_dir=tmp_path / "b").wasm.read_bytes()
    assert first == second
