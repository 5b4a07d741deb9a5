"""SDK hello and conformance plugins and the example plugins, built from source
once per run and exercised end to end (Python API and `wasmext call`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support import SDK_LANGS as SDKS
from support import Built
from wasmext import PluginError, Runtime
from wasmext.testing import vector_value as from_json
from wasmext_cli.build import build_plugin

VECTORS = Path(__file__).resolve().parents[2] / "abi" / "vectors"
CANONICAL = json.loads((VECTORS / "msgpack.json").read_text())["canonical"]


def wasmext(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def conformance(built: Built, crt: Runtime, request: pytest.FixtureRequest) -> Any:
    lang = request.param
    return crt.load(built[f"conformance-{lang}"], settings={"greeting": "Servus"},
                        plugin_id=f"conf-{lang}")


@pytest.mark.parametrize("conformance", SDKS, indirect=True)
def test_echo_round_trips_every_vector(conformance: Any) -> None:
    for v in CANONICAL:
        value = from_json(v["value"])
        assert conformance.call("echo", value).value == value, v["name"]


@pytest.mark.parametrize("conformance", ["python", "javascript"], indirect=True)
def test_repack_round_trips_every_vector_through_the_sdks_own_codec(conformance: Any) -> None:
    """The component SDKs' `echo` returns its data; `repack` sends it through the SDK's
    MessagePack writer and reader once more inside the handler."""
    for v in CANONICAL:
        value = from_json(v["value"])
        assert conformance.call("repack", value).value == value, v["name"]


@pytest.mark.parametrize("conformance", SDKS, indirect=True)
def test_conformance_hooks(conformance: Any) -> None:
    assert conformance.call("config", "greeting").value == "Servus"
    with pytest.raises(PluginError) as info:
        conformance.call("config", "no-such-setting")
    assert info.value.code == "not_found"
    assert conformance.call("log", "hello from the guest").value is None
    assert [ln.text for ln in conformance.log.lines][-1] == "hello from the guest"
    answer = conformance.call("host", {"op": "no.such.op"}).value
    assert answer["ok"] is False
    assert answer["error"]["code"] == "unsupported"
    denied = conformance.call("host", {"op": "state.get", "key": "k"}).value
    assert denied["error"]["code"] == "denied"
    with pytest.raises(PluginError) as failed:
        conformance.call("fail", "on purpose")
    assert (failed.value.code, failed.value.message) == ("failed", "on purpose")
    same = conformance.call("unchanged", {"x": 1})
    assert (same.changed, same.value) == (False, {"x": 1})
    stop = conformance.call("stop", [1, 2])
    assert (stop.value, stop.stop) == ([1, 2], True)
    with pytest.raises(PluginError) as unhandled:
        conformance.call("no_such_hook", None)
    assert unhandled.value.code == "unhandled"


@pytest.mark.parametrize("lang", SDKS)
def test_large_payload_near_the_cap(built: Built, crt: Runtime, lang: str) -> None:
    # This is about the size caps, not fuel: the interpreted guests (Python and
    # JavaScript components) spend 50-90 M fuel transcoding these 400 KB of text.
    conformance = crt.load(built[f"conformance-{lang}"], plugin_id=f"large-{lang}",
                               limits={"fuel_per_call": 10**9})
    big = "é" * 200_000  # 400 KB of two-byte UTF-8
    assert conformance.call("echo", big).value == big
    blob = bytes(range(256)) * 2000
    assert conformance.call("echo", blob).value == blob


# The Python and JavaScript hellos are components that no other default-tier test loads:
# each one is a componentize run and a component compile (about 27 s of a core, cold).
COMPONENT_HELLOS = {"python", "javascript"}


@pytest.mark.parametrize("lang", [pytest.param(lang, marks=pytest.mark.slow)
                                  if lang in COMPONENT_HELLOS else lang for lang in SDKS])
def test_hello_through_the_cli(built: Built, lang: str) -> None:
    folder = built[f"hello-{lang}"]
    out = wasmext("call", str(folder), "greet", "--data", '"Ada"')
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == "Hello, Ada!"
    out = wasmext("call", str(folder), "greet", "--data", '"Ada"', "--set", "greeting=Hi")
    assert json.loads(out.stdout) == "Hi, Ada!"
    info = json.loads(wasmext("inspect", str(folder), "--json").stdout)
    assert "greet" in [h["hook"] for h in info["hooks"]]


@pytest.mark.parametrize("lang", SDKS)
def test_hello_source_fits_on_one_screen(lang: str) -> None:
    hello = Path(__file__).resolve().parents[2] / "guest-sdks" / lang / "examples" / "hello"
    suffixes = {".c", ".zig", ".rs", ".ts", ".go", ".py", ".js"}
    sources = [p for p in hello.rglob("*") if p.suffix in suffixes]
    assert sources, f"no hello source for {lang}"
    assert sum(len(p.read_text().splitlines()) for p in sources) <= 60


@pytest.mark.parametrize(("text", "expected"), [
    ("mail ann.lee+x@example.co.uk now", "mail [EMAIL] now"),
    ("card 4111 1111 1111 1111.", "card [CARD]."),
    ("card 4111-1111-1111-1111", "card [CARD]"),
    ("call +1 (415) 555-0100 today", "call [PHONE] today"),
    ("ruf 030 1234567 an", "ruf [PHONE] an"),
    ("order 4111 1111 1111 1112 is not a card", None),
    ("Grüße an zoë@exämple.de 😀", None),
])
def test_pii_mask(built: Built, runtime: Runtime, text: str,
                  expected: str | None) -> None:
    plugin = runtime.load(built["pii-mask"])
    result = plugin.call("on_plain_text", text)
    if expected is not None:
        assert result.value == expected
    else:
        assert "4111 1111 1111 1112" in result.value or "[EMAIL]" in result.value
        assert "😀" in result.value or "1112" in result.value


def test_pii_mask_settings_and_unchanged(built: Built, runtime: Runtime) -> None:
    plugin = runtime.load(built["pii-mask"], settings={"mask_email": False})
    result = plugin.call("on_llm_output", "ann@example.com 4111111111111111")
    assert result.value == "ann@example.com [CARD]"
    clean = plugin.call("on_plain_text", "nothing to see here")
    assert clean.changed is False


@pytest.mark.parametrize(("settings", "text", "expected"), [
    ({}, "  Hello \t\n  World  ", "Hello World"),
    ({"lowercase": True}, "ÄBC Ωμέγα ДОМ", "äbc ωμέγα дом"),
    ({"emoji": "strip"}, "hi 😀 there 👍🏽 ok", "hi there ok"),
    ({"whitespace": False, "lowercase": True}, "  A  B ", "  a  b "),
])
def test_normalize_text(built: Built, runtime: Runtime, settings: dict[str, Any],
                        text: str, expected: str) -> None:
    plugin = runtime.load(built["normalize-text"], settings=settings)
    assert plugin.call("on_plain_text", text).value == expected


def test_normalize_text_rejects_bad_setting(built: Built, runtime: Runtime) -> None:
    plugin = runtime.load(built["normalize-text"], settings={"emoji": "explode"})
    with pytest.raises(PluginError) as info:
        plugin.call("on_plain_text", "x")
    assert info.value.code == "invalid"
    assert "emoji" in info.value.message


def test_builds_are_reproducible(built: Built, tmp_path: Path) -> None:
    for name in ("pii-mask", "normalize-text"):
        first = (built[name] / f"{name}.wasm").read_bytes()
        again = build_plugin(built[name], out_dir=tmp_path).wasm.read_bytes()
        assert first == again, name


def test_examples_through_the_cli(built: Built) -> None:
    out = wasmext("call", str(built["pii-mask"]), "on_plain_text", "--data",
                  '"ann@example.com"')
    assert (out.returncode, json.loads(out.stdout)) == (0, "[EMAIL]")
    out = wasmext("call", str(built["normalize-text"]), "on_plain_text", "--set",
                  "lowercase=true", "--data", '"  A  B "')
    assert (out.returncode, json.loads(out.stdout)) == (0, "a b")


def test_hook_priority_defaults_to_the_manifest(built: Built, runtime: Runtime) -> None:
    pii = runtime.load(built["pii-mask"])
    assert {h.priority for h in pii.registration.hooks} == {90}
    hello = runtime.load(built["hello-zig"])
    assert [h.priority for h in hello.registration.hooks] == [50]


@pytest.mark.parametrize("lang", SDKS)
def test_every_op_through_every_sdk(built: Built, crt: Runtime, tmp_path: Path,
                                    lang: str) -> None:
    """The conformance `host` hook forwards raw requests: each op answers alike in every SDK."""
    from wasmext import Host, HostConfig

    grants = {"state", "events", "emit:conf.*", "secrets"}
    host = Host(HostConfig(data_dir=tmp_path, state_backend="memory"), runtime=crt,
                plugin_dirs=[])
    plugin = host.add(built[f"conformance-{lang}"], plugin_id="conf", grants=grants)

    def op(request: dict[str, Any]) -> Any:
        return plugin.call("host", request, {"session": "s1"}).value

    try:
        assert op({"op": "state.set", "key": "ü", "value": {"bin": b"\0\xff", "n": -1}}) == {
            "ok": True, "value": None}
        assert op({"op": "state.get", "key": "ü"})["value"] == {"bin": b"\0\xff", "n": -1}
        assert op({"op": "state.keys"})["value"] == ["ü"]
        assert op({"op": "state.cas", "key": "ü", "expected": 1, "value": 2})["error"][
            "code"] == "conflict"
        assert op({"op": "state.delete", "key": "ü"})["value"] is True
        assert op({"op": "state.get", "key": "ü"})["error"]["code"] == "not_found"
        assert op({"op": "event.emit", "topic": "conf.ping", "payload": 1})["ok"] is True
        assert op({"op": "event.emit", "topic": "other", "payload": 1})["error"][
            "code"] == "denied"
        assert op({"op": "abi.info"})["value"]["major"] == 1
        assert op({"op": "tool.call"})["error"]["code"] == "denied"
        assert op({"op": "no.such"})["error"]["code"] == "unsupported"
    finally:
        host.close()


@pytest.mark.parametrize("lang", SDKS)
def test_oversize_output_is_refused(built: Built, crt: Runtime, lang: str) -> None:
    plugin = crt.load(built[f"conformance-{lang}"], plugin_id=f"big-{lang}",
                          limits={"max_output_bytes": 4096})
    from wasmext import InvalidOutput

    with pytest.raises(InvalidOutput, match="max_output_bytes"):
        plugin.call("echo", "x" * 5000)
    assert plugin.call("echo", "small").value == "small"


def test_zig_sdk_dispatches_by_pattern_and_adds_entries(built: Built, runtime: Runtime) -> None:
    plugin = runtime.load(built["zig-tags"])
    tag = {"attrs": {}, "content": "hi"}
    assert plugin.call("on_tag", {"tag": "upper", **tag}).value == "HI"
    assert plugin.call("on_tag", {"tag": "redact-x", **tag}).value == "[REDACTED]"
    with pytest.raises(PluginError) as info:
        plugin.call("on_tag", {"tag": "other", **tag})
    assert info.value.code == "unhandled"
    assert plugin.registration.extra == {"subscriptions": ["audit.*"]}
    assert [h.pattern for h in plugin.registration.hooks] == ["upper", "redact*"]
    assert not plugin.registration.shareable  # registerExtra may depend on anything
