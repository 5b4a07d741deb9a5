"""The Go guest SDK: its native `go test` suites, and its plugins end to end.

`go test ./...` in guest-sdks/go runs the MessagePack tests against
abi/vectors (canonical and decode_only vectors byte for byte, every
truncation, hostile.json, huge declared lengths, depth 64/65, integer and
length boundaries, 50,000 random mutations), the registration and dispatch
tests with a fake host, and the comparison of the SDK's constants with
abi/abi.toml. The plugins are built with `wasmext build` and run through the
real host. Everything that needs Go is skipped, with the install command as
the reason, when no Go >= 1.24 is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import build_once, run_cache
from wasmext import PluginError, Runtime
from wasmext._abi import ABI_MINOR
from wasmext.manifest import BuildSpec
from wasmext_cli.build import ToolchainMissing, build_plugin
from wasmext_cli.build import go as build_go

ROOT = Path(__file__).resolve().parents[2]
GO_SDK = ROOT / "guest-sdks" / "go"
HELLO = GO_SDK / "examples" / "hello"
CONFORMANCE = GO_SDK / "conformance"


def _missing_go() -> str | None:
    try:
        build_go.toolchain()
    except ToolchainMissing as exc:
        return str(exc)
    return None


MISSING = _missing_go()
needs_go = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def go_run(*args: str, env: dict[str, str] | None = None) -> str:
    """Run the go command in the SDK folder; fail with its output when it fails."""
    go = build_go.toolchain()
    run_env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly", "GOWORK": "off",
               "CGO_ENABLED": "0", **(env or {})}
    proc = subprocess.run([go, *args], cwd=GO_SDK, env=run_env, capture_output=True, text=True,
                          timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return output


@needs_go
@pytest.mark.toolchain
def test_go_unit_tests() -> None:
    out = go_run("test", "-count=1", "./...",
                 env={"WASMEXT_VECTORS": str(ROOT / "abi" / "vectors"),
                      "WASMEXT_ABI_TOML": str(ROOT / "abi" / "abi.toml")})
    assert "ok  \twasmext.dev/wasmext\t" in out, out
    assert "ok  \twasmext.dev/wasmext/msgpack\t" in out, out


@needs_go
@pytest.mark.toolchain
def test_go_vet_for_wasip1_and_gofmt() -> None:
    go_run("vet", "./...", env={"GOOS": "wasip1", "GOARCH": "wasm"})
    go_run("vet", "./...")
    gofmt = Path(build_go.toolchain()).with_name("gofmt")
    proc = subprocess.run([str(gofmt), "-l", "."], cwd=GO_SDK, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout == "", f"not gofmt-ed:\n{proc.stdout}"


# -- plugins through the real host ----------------------------------------------------------


@pytest.fixture(scope="module")
def rt() -> Iterator[Runtime]:
    """One runtime on the run's compile cache: Go modules take seconds to compile."""
    if MISSING is not None:
        pytest.skip(MISSING)
    for folder in (HELLO, CONFORMANCE):
        build_once(folder)
    with Runtime(cache=run_cache()) as runtime:
        yield runtime


def fuel_used(instance: Any) -> int:
    return int(instance.limits.fuel_per_call - instance.store.get_fuel())


@pytest.mark.toolchain
def test_hello(rt: Runtime) -> None:
    hello = rt.load(HELLO)
    assert hello.call("greet", "Ada").value == "Hello, Ada!"
    assert rt.load(HELLO, settings={"greeting": "Howdy"}).call("greet", "Bob").value == \
        "Howdy, Bob!"
    with pytest.raises(PluginError) as err:
        hello.call("greet", 42)
    assert err.value.code == "invalid"
    assert [ln.text for ln in hello.log.lines][-1] == "Hello, Ada!"


@pytest.mark.toolchain
def test_module_is_a_reactor_with_only_allowed_imports(rt: Runtime) -> None:
    module = rt.compile((HELLO / "hello.wasm").read_bytes()).module
    exports = {e.name for e in module.exports}
    assert {"memory", "_initialize", "wasmext_abi_version", "wasmext_alloc", "wasmext_free",
            "wasmext_register", "wasmext_call"} <= exports
    assert "_start" not in exports
    for imp in module.imports:
        assert imp.module == "wasi_snapshot_preview1" or \
            (imp.module, imp.name) in {("wasmext", "host_call"), ("wasmext", "log")}, imp.name


@pytest.mark.toolchain
def test_registration_leaves_priority_to_the_host(rt: Runtime) -> None:
    reg = rt.load(HELLO).registration
    assert (reg.name, reg.version, reg.abi_minor) == ("hello", "0.1.0", ABI_MINOR)
    assert [(h.hook, h.priority) for h in reg.hooks] == [("greet", 50)]
    assert [h.priority for h in rt.load(HELLO, priority=7).registration.hooks] == [7]


@pytest.mark.toolchain
def test_fuel_fits_the_default_limits(rt: Runtime) -> None:
    """Go's runtime starts in well under the default 50M fuel, and calls stay cheap."""
    plugin: Any = rt.load(CONFORMANCE)
    assert plugin.limits.fuel_per_call == 50_000_000  # the manifest sets no [limits]
    inst = plugin.new_instance()  # _initialize + register, each with its own budget
    inst.call("echo", "x" * 100)
    assert fuel_used(inst) < 200_000
    inst.call("config", "greeting")
    assert fuel_used(inst) < 500_000
    big = "é" * 200_000
    assert inst.call("echo", big).value == big
    assert fuel_used(inst) < 5_000_000
    items = list(range(10_000))
    assert inst.call("echo", items).value == items
    assert fuel_used(inst) < 25_000_000
    text = "x" * 1_000_000  # the request nearly fills max_input_bytes
    assert inst.call("echo", text).value == text


@pytest.mark.toolchain
def test_many_calls_on_one_instance(rt: Runtime) -> None:
    """Regions the host hands back and the garbage collector keep memory bounded."""
    plugin: Any = rt.load(CONFORMANCE)
    inst = plugin.new_instance()
    for i in range(3000):
        assert inst.call("config", "count").value == 3
        if i % 500 == 0:
            assert inst.call("echo", "y" * 300_000).changed
    assert inst.memory.size() < 32 * 2**20


@pytest.mark.toolchain
def test_depth_limit_through_the_host(rt: Runtime) -> None:
    plugin = rt.load(CONFORMANCE)
    value: Any = None
    for _ in range(63):  # the response map makes it 64
        value = [value]
    assert plugin.call("echo", value).value == value
    assert plugin.call("stop", value).stop is True


@needs_go
@pytest.mark.toolchain
def test_builds_are_reproducible_and_path_independent(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    reference = build_plugin(HELLO, out_dir=tmp_path / "ref").wasm.read_bytes()
    assert build_plugin(HELLO, out_dir=tmp_path / "again").wasm.read_bytes() == reference
    for checkout in (tmp_path / "a", tmp_path / "a-much-longer" / "checkout" / "path"):
        sdks = checkout / "guest-sdks"
        shutil.copytree(GO_SDK, sdks / "go", ignore=shutil.ignore_patterns("*.wasm"))
        monkeypatch.setenv("WASMEXT_SDK_DIR", str(sdks))
        built = build_plugin(sdks / "go" / "examples" / "hello")
        assert built.wasm.read_bytes() == reference, checkout
        assert str(checkout).encode() not in built.wasm.read_bytes()


# -- the build module, with or without Go --------------------------------------------------------


def test_missing_go_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_go, "find_go", lambda: None)
    spec = BuildSpec(lang="go", sources=("hello.go",))
    with pytest.raises(ToolchainMissing) as info:
        build_go.commands(spec, HELLO, HELLO / "hello.wasm")
    assert "setup-toolchain.sh" in str(info.value)
    monkeypatch.setattr(build_go, "find_go", lambda: "/opt/old/go")
    monkeypatch.setattr(build_go, "go_version", lambda go: (1, 21))
    with pytest.raises(ToolchainMissing) as old:
        build_go.commands(spec, HELLO, HELLO / "hello.wasm")
    assert "go1.21" in str(old.value)
    assert "go1.24 or newer" in str(old.value)


def test_build_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(build_go, "toolchain", lambda: "/usr/bin/go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = BuildSpec(lang="go", sources=("hello.go",))
    prepare, build = build_go.commands(spec, HELLO, tmp_path / "out.wasm")
    assert prepare[1:4] == ["-m", "wasmext_cli.build.go", "prepare"]
    assert build[0] == "env" and "GOOS=wasip1" in build and "GOARCH=wasm" in build
    assert build[build.index("/usr/bin/go"):][:4] == ["/usr/bin/go", "build", "-C",
                                                      str(build_go.work_dir(HELLO))]
    assert "-buildmode=c-shared" in build and "-trimpath" in build
    assert build[-3:] == ["-o", str(tmp_path / "out.wasm"), "."]
    work = build_go.work_dir(HELLO)
    build_go.prepare(work, HELLO, GO_SDK, ["hello.go"])
    assert (work / "hello.go").read_bytes() == (HELLO / "hello.go").read_bytes()
    assert (work / "sdk").resolve() == GO_SDK.resolve()
    assert "replace wasmext.dev/wasmext => ./sdk" in (work / "go.mod").read_text()
    with pytest.raises(Exception, match="inside the plugin folder"):
        build_go.prepare(work, HELLO, GO_SDK, ["../x.go"])
