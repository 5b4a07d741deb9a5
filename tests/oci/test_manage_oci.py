"""`wasmext_plugin_load` of an `oci://` reference (mcp.server.manage): pulled only from a
registry and name the operator allows, installed with every OCI and bundle check, and
loaded with no grant; the official SDK client against the real registry of the run."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp_types as types
import pytest
from conftest import Registry
from mcp.client.client import Client
from oci_support import fresh_name, write_plugin

from wasmext import Host, HostConfig
from wasmext.config import ManageSettings
from wasmext.errors import ManageRefused
from wasmext.lifecycle import oci
from wasmext.mcp.server.manage import Manager
from wasmext.mcp.server.serve import McpToolServer


def _host(tmp_path: Path) -> Host:
    return Host(HostConfig(data_dir=tmp_path / ".wasmext", workspace_dir=tmp_path / "plugins"))


def test_a_client_loads_from_an_allowed_registry_with_no_grant(registry: Registry,
                                                                tmp_path: Path) -> None:
    name = fresh_name()
    ref = f"oci://{registry.address}/team/kb{name}:1"
    oci.push(write_plugin(tmp_path / "src", "kb", "from the registry"), ref)
    settings = ManageSettings(True, (), "workspace", (f"{registry.address}/team/*",))
    with _host(tmp_path) as host:
        server = McpToolServer(host, manage=settings, poll_interval=0)

        async def main() -> None:
            async with Client(server.server, read_timeout_seconds=60) as client:
                done = await client.call_tool("wasmext_plugin_load", {"path": ref})
                assert not done.is_error, done.content
                assert done.structured_content is not None
                assert done.structured_content["loaded"] is True
                assert done.structured_content["granted"] == []
                other = await client.call_tool("wasmext_plugin_load", {
                    "path": f"oci://{registry.address}/elsewhere/kb{name}:1"})
                assert other.is_error
                assert isinstance(other.content[0], types.TextContent)
                assert other.content[0].text.startswith("refused: ")
        anyio.run(main)
        assert host.plugins["kb"].plugin.call("test").value == "from the registry"
        assert host.plugins["kb"].plugin.grants == frozenset()


@pytest.mark.parametrize("patterns", [(), ("127.0.0.1:1/*",), ("*/other/*",)])
def test_a_registry_the_operator_did_not_allow_is_never_contacted(
        registry: Registry, tmp_path: Path, patterns: tuple[str, ...]) -> None:
    with _host(tmp_path) as host:
        mgr = Manager(host, ManageSettings(True, (), "workspace", patterns))
        with pytest.raises(ManageRefused, match="registries"):
            mgr.load({"path": f"oci://{registry.address}/team/never{fresh_name()}:1"})
        with pytest.raises(ManageRefused, match="registries"):
            mgr.load({"path": "oci://169.254.169.254/latest/meta-data:1"})
        assert not (tmp_path / "plugins").exists() or not any((tmp_path / "plugins").iterdir())
