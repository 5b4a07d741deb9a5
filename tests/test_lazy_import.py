"""`import wasmext` loads no heavy dependency: each public name comes on first use.

Measured by what lands in `sys.modules` of a fresh interpreter, not by time
(speed is the benchmarks' business); the CLI's `--help` is held to the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import wasmext

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ["mcp", "prometheus_client", "jsonschema_rs", "extism", "click", "wasmtime", "msgpack"]
PROBE = "import sys, json\n{code}\nprint(json.dumps([m for m in {heavy!r} if m in sys.modules]))"


def _loaded_after(code: str, *args: str, heavy: list[str] = HEAVY) -> list[str]:
    env = {"PYTHONPATH": f"{ROOT / 'host'}:{ROOT / 'cli'}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", PROBE.format(code=code, heavy=heavy), *args],
                         capture_output=True, text=True, env=env, timeout=60, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_wasmext_loads_nothing_heavy() -> None:
    assert _loaded_after("import wasmext") == []


def test_a_public_name_loads_on_first_use() -> None:
    loaded = _loaded_after("import wasmext\nwasmext.Runtime")
    assert "wasmtime" in loaded
    assert "click" not in loaded and "mcp" not in loaded


def test_cli_help_loads_no_runtime() -> None:
    code = "from wasmext_cli.main import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
    loaded = _loaded_after(code, "--help")
    assert loaded == ["click"]


def test_cli_help_loads_no_command_module() -> None:
    """`--help` lists the commands from their summaries: no command, host or rich import."""
    code = "from wasmext_cli.main import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
    modules = ["wasmext", "rich", "pydantic", "asyncio", "logging", "pathlib",
               "wasmext_cli.plugin_cmd", "wasmext_cli.run_cmd", "wasmext_cli.build_cmd"]
    assert _loaded_after(code, "--help", heavy=modules) == []


def test_every_exported_name_resolves() -> None:
    assert "__version__" in wasmext.__all__
    for name in wasmext.__all__:
        assert getattr(wasmext, name) is not None, name
    assert set(wasmext.__all__) <= set(dir(wasmext))


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        wasmext.no_such_name  # noqa: B018


def test_the_pytest_plugin_loads_nothing_heavy_until_its_fixture_is_used() -> None:
    # Every pytest run in a project that installed wasmext loads the pytest11 plugin.
    assert _loaded_after("import wasmext.pytest_plugin") == []


def test_loading_and_calling_a_plugin_loads_no_config_models(tmp_path: Path) -> None:
    """What a plugin's own test does (wasmext.testing, a Runtime, a load, a call) loads
    neither the config models (pydantic) nor the MCP, NATS or OpenTelemetry stacks: those
    come with a host config, an MCP server or tracing, which such a test has none of."""
    import wasmtime

    from wasmext.testing import guest_wat

    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "plugin.toml").write_text('id = "plain"\nversion = "0.1.0"\nabi = 1\n')
    (folder / "plain.wasm").write_bytes(bytes(wasmtime.wat2wasm(guest_wat(hooks=("greet",)))))
    code = ("import sys\nfrom wasmext import Runtime\nimport wasmext.testing\n"
            "with Runtime(cache=False) as rt:\n"
            "    assert rt.load(sys.argv[1]).call('greet', 'Ada').value == 'ok'")
    stacks = ["pydantic", "wasmext.mcp.config", "wasmext.validation", "mcp", "nats",
              "opentelemetry", "httpx", "anyio"]
    assert _loaded_after(code, str(folder), heavy=["wasmtime", *stacks]) == ["wasmtime"]


def test_a_host_with_a_plugin_is_built_without_the_http_client() -> None:
    """httpx and httpcore come with the first `http.fetch` or `llm.complete` client: a
    host that never fetches does not keep their objects for every collection to scan."""
    code = ("import wasmtime\nfrom wasmext.testing import guest_wat, make_host\n"
            "make_host(bytes(wasmtime.wat2wasm(guest_wat(hooks=('on_plain_text',)))))"
            ".close()")
    assert _loaded_after(code, heavy=["wasmext.host", "httpx2", "httpcore2"]) == \
        ["wasmext.host"]


def test_a_plugin_granted_http_brings_the_http_client_at_load_not_in_its_first_call() -> None:
    code = ("import wasmtime\nfrom wasmext.testing import guest_wat, make_host\n"
            "make_host((bytes(wasmtime.wat2wasm(guest_wat(hooks=('on_plain_text',)))), "
            "{'plugin_id': 'f', 'grants': {'http'}})).close()")
    assert _loaded_after(code, heavy=["httpx2", "httpcore2"]) == ["httpx2", "httpcore2"]


DEFERRED = ["pydantic", "prometheus_client", "sqlite3", "asyncio", "importlib.metadata",
            "jsonschema_rs", "wasmext.configfile", "wasmext.validation",
            "wasmext.cluster.natsconfig", "wasmext.cluster.registry", "wasmtime.component",
            "wasmext.services.agent_config", "wasmext.services.llm.config",
            "wasmext.state.sqlite", "wasmext.mcp.config",
            "wasmext.observe.tracing_config", "http.cookiejar", "rich"]


def test_import_wasmext_host_loads_no_config_schema_metrics_or_sqlite() -> None:
    """`import wasmext.host` (every command pays it) builds no config model and loads
    neither prometheus_client, sqlite3, asyncio nor the cluster's and sections' schemas:
    they come with a config file, a scrape, a sqlite store or a loop."""
    assert _loaded_after("import wasmext.host", heavy=DEFERRED) == []


def test_the_call_command_loads_only_what_a_call_needs() -> None:
    """`wasmext call` (a throwaway host, memory state, no config file) loads the runtime,
    not the deferred stacks; the answer is the plugin's."""
    wasm = ROOT / "cli" / "wasmext_cli" / "example" / "plugins" / "pii-mask" / "pii-mask.wasm"
    code = ("from wasmext_cli.main import main\ntry:\n    main()\nexcept SystemExit as exc:\n"
            "    assert not exc.code, exc.code")
    loaded = _loaded_after(code, "call", str(wasm), "on_plain_text", "--data", '"a b"',
                           heavy=["wasmtime", *DEFERRED])
    assert loaded == ["wasmtime"]


def test_a_config_file_brings_its_schema(tmp_path: Path) -> None:
    """Deferred, not dropped: parsing a wasmext.toml builds the models and still names
    every problem."""
    (tmp_path / "wasmext.toml").write_text("[limits]\nfuel_per_call = 0\n[nats]\nuser = ''\n")
    code = ("import sys\nfrom wasmext.config import load_config\nfrom wasmext.errors import "
            "ConfigError\ntry:\n    load_config(sys.argv[1])\nexcept ConfigError as err:\n"
            "    assert 'limits.fuel_per_call' in str(err) and 'nats.user' in str(err), err\n"
            "else:\n    raise AssertionError('accepted')")
    loaded = _loaded_after(code, str(tmp_path / "wasmext.toml"),
                           heavy=["pydantic", "wasmext.configfile", "wasmext.cluster.natsconfig"])
    assert loaded == ["pydantic", "wasmext.configfile", "wasmext.cluster.natsconfig"]


def test_the_config_module_still_exports_its_schema() -> None:
    from wasmext import config

    assert config.ConfigFile.__name__ == "ConfigFile"
    assert config.LimitsTable.__name__ == "LimitsTable"
    assert config.McpServerConfig.__name__ == "McpServerConfig"
    assert set(config.__all__) <= set(dir(config)) | {"ConfigFile", "McpServerConfig"}
    with pytest.raises(AttributeError, match="no_such_name"):
        config.no_such_name  # noqa: B018


def test_wasmtime_version_is_what_its_metadata_says() -> None:
    """The compile cache keys on it: the cheap read must equal importlib.metadata's."""
    from importlib.metadata import version

    from wasmext.sandbox.fastcall import wasmtime_version

    assert wasmtime_version() == version("wasmtime")
