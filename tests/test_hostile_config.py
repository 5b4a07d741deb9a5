"""Hostile plugin folders: a manifest raising its own limits, TOML built to crash
the parser, and symlinks out of the folder, through every loading path (Runtime,
Host, discovery and the command line). Each test bounds its time and proves a
healthy plugin still answers afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wasmext import (
    ConfigError,
    Host,
    HostConfig,
    Limits,
    ManifestError,
    Runtime,
    UnsafeFolder,
    load_config,
)
from wasmext.hooks.pipeline import load_policy
from wasmext.manifest import load_manifest
from wasmext.testing import guest_wat

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = Limits()
RAISING = ("[limits]\nmemory_bytes = 4294901760\ntimeout_ms = 600000\n"
           "fuel_per_call = 10000000000000\n")
DEEP_ARRAYS = "x = " + "[" * 3000 + "]" * 3000 + "\n"
DEEP_TABLES = "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n"
DEEP_DOTTED = ".".join(["a"] * 3000) + " = 1\n"
BOUND_S = 60.0  # generous: the machine is shared


def plugin_folder(root: Path, pid: str, extra: str = "", value: str = "alive") -> Path:
    folder = root / pid
    folder.mkdir(parents=True)
    wat = guest_wat(response={"ok": True, "value": value})
    (folder / f"{pid}.wasm").write_bytes(wasmtime.wat2wasm(wat))
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\n{extra}')
    return folder


def symlinked_wasm(root: Path, pid: str = "sneaky") -> Path:
    """A plugin folder whose module is a symlink to a file outside it."""
    folder = plugin_folder(root, pid)
    outside = root.parent / f"outside-{pid}.wasm"
    (folder / f"{pid}.wasm").rename(outside)
    (folder / f"{pid}.wasm").symlink_to(outside)
    return folder


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cwd / "xdg"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=BOUND_S)


def one_clean_line(stderr: str) -> None:
    assert "Traceback" not in stderr and "RecursionError" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


@pytest.fixture
def clock() -> Iterator[None]:
    started = time.monotonic()
    yield
    assert time.monotonic() - started < BOUND_S


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _host(tmp_path: Path, plugins: Path, config: str = "") -> Host:
    cfg = tmp_path / "wasmext.toml"
    cfg.write_text(f'[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "{plugins.name}"\n'
                   + config)
    return Host(load_config(cfg))


# -- a manifest may only lower the host's limits -----------------------------------------


def test_a_manifest_cannot_raise_its_own_limits(tmp_path: Path, clock: None) -> None:
    folder = plugin_folder(tmp_path / "plugins", "greedy", RAISING)
    with Runtime(cache=False) as rt:
        plugin = rt.load(folder)
        assert plugin.limits == DEFAULTS
        assert plugin.requested_limits["memory_bytes"] == 4294901760
        assert plugin.call("test").value == "alive"
    with _host(tmp_path, tmp_path / "plugins") as host:
        assert host.plugins["greedy"].plugin.limits == DEFAULTS
        assert host.plugins["greedy"].plugin.call("test").value == "alive"
    proc = cli(tmp_path, "inspect", "--json", str(folder))
    assert proc.returncode == 0, proc.stderr
    limits = json.loads(proc.stdout)["limits"]
    assert limits["effective"] == DEFAULTS.as_dict()
    assert limits["requested"] == {"memory_bytes": 4294901760, "timeout_ms": 600000,
                                   "fuel_per_call": 10**13}
    text = cli(tmp_path, "inspect", str(folder))
    assert "4294901760 -> 67108864" in text.stdout


def test_a_manifest_may_lower_its_limits(tmp_path: Path, clock: None) -> None:
    folder = plugin_folder(tmp_path / "plugins", "modest", "[limits]\ntimeout_ms = 200\n")
    with Runtime(cache=False) as rt:
        plugin = rt.load(folder)
        assert plugin.limits == DEFAULTS.replace(timeout_ms=200)
        assert plugin.call("test").value == "alive"


def test_the_host_may_raise_a_plugin_up_to_the_policy_cap(tmp_path: Path, clock: None) -> None:
    plugin_folder(tmp_path / "plugins", "greedy", RAISING)
    plugin_folder(tmp_path / "plugins", "trusted")
    config = ("[limits.cap]\ntimeout_ms = 3000\nmemory_bytes = 268435456\n"
              "[plugin.greedy]\nlimits = { timeout_ms = 5000, memory_bytes = 134217728 }\n"
              "[plugin.trusted]\nlimits = { timeout_ms = 2000, memory_bytes = 536870912 }\n")
    with _host(tmp_path, tmp_path / "plugins", config) as host:
        greedy = host.plugins["greedy"].plugin.limits
        # the host's grant, the manifest's larger ask ignored, then the cap
        assert (greedy.timeout_ms, greedy.memory_bytes) == (3000, 134217728)
        assert greedy.fuel_per_call == DEFAULTS.fuel_per_call
        trusted = host.plugins["trusted"].plugin.limits
        assert (trusted.timeout_ms, trusted.memory_bytes) == (2000, 268435456)
        assert host.plugins["trusted"].plugin.call("test").value == "alive"


def test_explicit_limits_are_the_hosts_and_still_capped(tmp_path: Path) -> None:
    folder = plugin_folder(tmp_path / "plugins", "greedy", RAISING)
    policy = DEFAULTS.replace(timeout_ms=1500, fuel_per_call=10**9)
    with Runtime(cache=False, policy=policy) as rt:
        plugin = rt.load(folder, limits={"timeout_ms": 9000, "fuel_per_call": 10**8})
        assert (plugin.limits.timeout_ms, plugin.limits.fuel_per_call) == (1500, 10**8)
        assert plugin.limits.memory_bytes == DEFAULTS.memory_bytes


# -- hostile TOML ------------------------------------------------------------------------


@pytest.mark.parametrize("body", [DEEP_ARRAYS, DEEP_TABLES, DEEP_DOTTED],
                         ids=["arrays", "inline-tables", "dotted-keys"])
def test_deep_plugin_toml_beside_a_healthy_plugin(tmp_path: Path, body: str,
                                                  clock: None) -> None:
    plugins = tmp_path / "plugins"
    plugin_folder(plugins, "deep", body)
    plugin_folder(plugins, "healthy")
    with pytest.raises(ManifestError, match="nested"):
        load_manifest(plugins / "deep" / "plugin.toml")
    with _host(tmp_path, plugins) as host:
        assert sorted(host.plugins) == ["healthy"]
        assert [type(e) for e in host.load_errors] == [ManifestError]
        assert host.plugins["healthy"].plugin.call("test").value == "alive"
    proc = cli(tmp_path, "list", "--plugins", str(plugins))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "healthy"
    one_clean_line(proc.stderr)
    assert "not loaded" in proc.stderr and "deep" in proc.stderr


def test_oversized_and_special_plugin_toml(tmp_path: Path, clock: None) -> None:
    big = plugin_folder(tmp_path / "plugins", "big", "# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ManifestError, match="larger than"):
        load_manifest(big / "plugin.toml")
    fifo = tmp_path / "plugins" / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "plugin.toml")
    plugin_folder(tmp_path / "plugins", "healthy")
    with _host(tmp_path, tmp_path / "plugins") as host:
        assert sorted(host.plugins) == ["healthy"]
        reasons = " ".join(e.message for e in host.load_errors)
        assert "larger than" in reasons and "not a regular file" in reasons


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_host_config_and_policy_files_are_capped(tmp_path: Path, suffix: str) -> None:
    deep = tmp_path / f"deep{suffix}"
    deep.write_text(DEEP_ARRAYS if suffix == ".toml" else '{"x": ' + "[" * 100000
                    + "]" * 100000 + "}")
    with pytest.raises(ConfigError, match="nested"):
        load_policy(deep)
    if suffix == ".toml":
        with pytest.raises(ConfigError, match="nested"):
            load_config(deep)
        big = tmp_path / "big.toml"
        big.write_text("# " + "x" * (2 << 20))
        with pytest.raises(ConfigError, match="larger than"):
            load_config(big)


toml_ish = st.text(alphabet=st.sampled_from(list("[]{}=\"'#.,\n\\ az019-_")) | st.characters(),
                   max_size=400)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=200)
@given(st.one_of(st.text(max_size=300), toml_ish, st.binary(max_size=300),
                 st.integers(1, 5000).map(lambda n: "x = " + "[" * n + "]" * n),
                 st.integers(1, 5000).map(lambda n: ".".join(["k"] * n) + " = 1")))
def test_arbitrary_text_as_plugin_toml_only_raises_manifest_error(raw: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plugin.toml"
        path.write_bytes(raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass"))
        with contextlib.suppress(ManifestError):  # anything else fails the test
            load_manifest(path)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=200)
@given(st.one_of(st.text(max_size=300), toml_ish, st.binary(max_size=300),
                 st.sampled_from(["[limits]\nfuel_per_call = ", "[mcp.servers.", "[grants.",
                                  "[state]\nbackend = 'redis'\n", "[plugin.x]\nlimits = "])
                 .flatmap(lambda head: toml_ish.map(lambda tail: head + tail))))
def test_arbitrary_text_as_wasmext_toml_only_raises_config_error(raw: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wasmext.toml"
        path.write_bytes(raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass"))
        with contextlib.suppress(ConfigError):  # anything else fails the test
            load_config(path)


# -- symlinks out of a plugin folder ----------------------------------------------------


def test_symlinked_wasm_is_refused_by_runtime_and_host(tmp_path: Path, clock: None) -> None:
    plugins = tmp_path / "plugins"
    sneaky = symlinked_wasm(plugins)
    healthy = plugin_folder(plugins, "healthy")
    with Runtime(cache=False) as rt:
        with pytest.raises(UnsafeFolder, match="outside its plugin folder"):
            rt.load(sneaky)
        assert "sneaky" not in rt.plugins
        assert rt.load(healthy).call("test").value == "alive"
    with Host(HostConfig(data_dir=tmp_path / "data"), plugin_dirs=[]) as host:
        with pytest.raises(UnsafeFolder):
            host.add(sneaky)
        assert host.add(healthy).call("test").value == "alive"
    with _host(tmp_path, plugins) as host:
        assert sorted(host.plugins) == ["healthy"]
        assert [type(e) for e in host.load_errors] == [UnsafeFolder]


def test_symlinked_folder_and_manifest_are_refused(tmp_path: Path) -> None:
    real = plugin_folder(tmp_path / "elsewhere", "real")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "linked").symlink_to(real, target_is_directory=True)
    toml_link = plugin_folder(tmp_path / "plugins", "tomllink")
    (toml_link / "plugin.toml").unlink()
    (toml_link / "plugin.toml").symlink_to(real / "plugin.toml")
    with Runtime(cache=False) as rt:
        with pytest.raises(UnsafeFolder, match="is a symlink"):
            rt.load(tmp_path / "plugins" / "linked")
        with pytest.raises(UnsafeFolder, match="outside its plugin folder"):
            rt.load(toml_link)


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--json"], ["call", "{}", "test"]])
def test_symlinked_wasm_is_refused_by_the_cli(tmp_path: Path, command: list[str],
                                              clock: None) -> None:
    sneaky = symlinked_wasm(tmp_path / "plugins")
    healthy = plugin_folder(tmp_path / "plugins", "healthy")
    args = [command[0], *command[1:]] if command[0] == "inspect" else ["call"]
    target = [str(sneaky)] if command[0] == "inspect" else [str(sneaky), "test"]
    proc = cli(tmp_path, *args, *target)
    assert proc.returncode != 0
    one_clean_line(proc.stderr)
    assert "unsafe folder" in proc.stderr and "outside its plugin folder" in proc.stderr
    ok = cli(tmp_path, "call", str(healthy), "test")
    assert ok.returncode == 0 and json.loads(ok.stdout) == "alive"
