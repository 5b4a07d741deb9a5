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
