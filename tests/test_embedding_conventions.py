"""Embedding wasmext follows Python conventions (issue 12, item 7)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wasmext import ConfigError, Host, HostConfig, load_policy

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}


def test_the_library_logs_nothing_unless_the_application_configures_logging() -> None:
    code = ("import logging, wasmext\n"
            "logging.getLogger('wasmext.discovery').error('a plugin folder went wrong')\n")
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stderr == ""  # not printed by logging's last-resort handler


def test_py_typed_markers_ship() -> None:
    assert (ROOT / "host" / "wasmext" / "py.typed").is_file()
    assert (ROOT / "cli" / "wasmext_cli" / "py.typed").is_file()


def test_host_is_an_async_context_manager(tmp_path: Path) -> None:
    async def main() -> Host:
        async with Host(HostConfig(data_dir=tmp_path), plugin_dirs=[]) as host:
            host.state_store()  # opened, so closing has something to close
            assert host.runtime is not None
        return host

    host = asyncio.run(main())
    with pytest.raises(Exception):  # noqa: B017, PT011  the closed store refuses work
        host.state_store().get(__import__("wasmext.state", fromlist=["Scope"]).Scope("p"), "k")


def test_load_policy_takes_a_string_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "policy.toml").write_text((ROOT / "docs" / "examples" / "policy.toml").read_text())
    monkeypatch.chdir(tmp_path)
    assert load_policy("policy.toml") == load_policy(tmp_path / "policy.toml")


def test_host_tool_decorator_derives_the_schema_and_calls_by_keyword(tmp_path: Path) -> None:
    with Host(HostConfig(data_dir=tmp_path), plugin_dirs=[]) as host:
        @host.tool
        def add(a: int, b: int = 1) -> int:
            """Add two integers."""
            return a + b

        @host.tool(name="shout", description="Upper-case words.")
        def loud(words: list[str]) -> str:
            return " ".join(words).upper()

        tool = host.tools.tools["add"]
        assert tool.description == "Add two integers."
        assert tool.input_schema["properties"]["a"]["type"] == "integer"
        assert tool.input_schema["required"] == ["a"]
        assert host.tools.call("add", {"a": 2, "b": 3}) == {"status": "ok", "output": 5}
        assert host.tools.call("add", {"a": 2})["output"] == 3
        assert host.tools.call("shout", {"words": ["hi", "there"]})["output"] == "HI THERE"
        refused = host.tools.call("add", {"a": "two"})
        assert refused["status"] == "error"
        assert add(1, 2) == 3  # the decorator returns the function unchanged

        def spread(*args: int) -> int:
            return sum(args)

        with pytest.raises(ConfigError, match="keyword"):
            host.tool(spread)


def test_the_pytest_fixture_is_documented(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--fixtures", "-q",
                           "-p", "no:cacheprovider"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert "wasmext_host" in proc.stdout
    assert "A factory for hosts under test" in proc.stdout


# The public API (issue 23): what an embedding program uses, every error, nothing else.
EMBEDDING = {
    "AsyncSession", "CallResult", "CompileCache", "ExtensionResult", "Host", "HostConfig",
    "LifecycleResult", "Limits", "PipelineResult", "Plugin", "Policy", "Prompt", "RescanReport",
    "Runtime", "Session", "ToolGuidance", "Trace", "TraceEvent", "Tracing", "TracingSettings",
    "TransformResult",
    "__version__", "load_config", "load_policy", "parse_policy", "tune_gc",
}


def test_all_is_the_embedding_api_and_every_error() -> None:
    import wasmext
    from wasmext import errors

    assert set(wasmext.__all__) == EMBEDDING | set(errors.__all__)
    assert len(wasmext.__all__) == len(set(wasmext.__all__))
    for name in wasmext.__all__:
        assert getattr(wasmext, name) is not None, name
    for name in errors.__all__:
        assert getattr(wasmext, name) is getattr(errors, name)


def test_internals_are_not_exported_but_stay_importable_from_their_modules() -> None:
    import wasmext
    from wasmext.sandbox.hostcalls import CallContext, HostServices
    from wasmext.sandbox.plugin import Registration
    from wasmext.sandbox.wasmcheck import ModuleCaps
    from wasmext.services.llm.client import ChatRequest

    for internal in (CallContext, HostServices, Registration, ModuleCaps, ChatRequest):
        assert internal.__name__ not in wasmext.__all__
        with pytest.raises(AttributeError):
            getattr(wasmext, internal.__name__)


def test_each_public_name_is_declared_once_and_typed_alike() -> None:
    """The lazy table is the one list; the TYPE_CHECKING imports mirror it exactly."""
    import ast

    import wasmext

    tree = ast.parse((ROOT / "host" / "wasmext" / "__init__.py").read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                for alias in stmt.names:
                    assert alias.asname == alias.name  # an explicit re-export for mypy
                    typed[alias.name] = stmt.module
    assert typed == wasmext._LAZY
    literals = [node.value for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and node.value in wasmext._LAZY]
    assert sorted(literals) == sorted(wasmext._LAZY)  # each name once, as a table key
