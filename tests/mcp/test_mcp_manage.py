"""Runtime management over MCP (mcp.server.manage): the official SDK client against
`wasmext mcp serve --manage`, and the confinement of the paths a client names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import msgpack
import pytest
import wasmtime
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from support import Built, free_port
from wasmext import HostConfig
from wasmext.config import ManageSettings, load_config
from wasmext.errors import BundleError, ManageRefused, SignatureRequired
from wasmext.host import Host
from wasmext.lifecycle.approvals import ApprovalStore, subject_of
from wasmext.lifecycle.bundle import pack, sign_bundle
from wasmext.lifecycle.signing import generate_key
from wasmext.mcp.server.manage import MANAGE_TOOLS, Manager, read_confined
from wasmext.mcp.server.serve import McpToolServer, build_http_server
from wasmext.testing import DATA_AT, guest_wat, make_host

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60
ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")]),
       "PATH": os.environ.get("PATH", "")}

# The tool `bump` makes one state.set host call and answers the host's reply as it is:
# {"ok": true, ...} once granted `state`, {"ok": false, "error": {"code": "denied"}} before.
_REQUEST = msgpack.packb({"op": "state.set", "key": "n", "value": 1})
_PREFIX = b"\x82\xa2ok\xc3\xa5value"  # {"ok": true, "value": <the host's reply follows>}
COUNTER = guest_wat(
    f"""(local $ans i64) (local $ap i32) (local $al i32) (local $out i32)
    (local.set $ans (call $host_call (i32.const {DATA_AT}) (i32.const {len(_REQUEST)})))
    (local.set $ap (i32.wrap_i64 (i64.shr_u (local.get $ans) (i64.const 32))))
    (local.set $al (i32.wrap_i64 (local.get $ans)))
    (local.set $out (call $alloc (i32.add (local.get $al) (i32.const {len(_PREFIX)}))))
    (memory.copy (local.get $out) (i32.const {DATA_AT + len(_REQUEST)})
                 (i32.const {len(_PREFIX)}))
    (memory.copy (i32.add (local.get $out) (i32.const {len(_PREFIX)})) (local.get $ap)
                 (local.get $al))
    (i64.or (i64.shl (i64.extend_i32_u (local.get $out)) (i64.const 32))
            (i64.extend_i32_u (i32.add (local.get $al) (i32.const {len(_PREFIX)}))))""",
    imports='(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))',
    data=_REQUEST + _PREFIX,
    registration={"hooks": [{"hook": "on_tool"}],
                  "tools": [{"name": "bump", "description": "Write state"}]})
KB = guest_wat(response={"ok": True, "value": {"found": 1}},
               registration={"hooks": [{"hook": "on_tool"}], "tools": [{"name": "lookup"}]})


def write_plugin(parent: Path, pid: str, wat: str, capabilities: tuple[str, ...] = ()) -> Path:
    folder = parent / pid
    folder.mkdir(parents=True)
    asks = f"capabilities = {json.dumps(list(capabilities))}\n" if capabilities else ""
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "0.1.0"\nabi = 1\n{asks}')
    (folder / f"{pid}.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))
    return folder


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A config with a plugin folder, an allowed `incoming` folder and a secret one beside."""
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = ".wasmext"\n[plugins]\nworkspace_dir = "plugins"\n'
        '[manage]\nsources = ["incoming"]\n')
    write_plugin(tmp_path / "plugins", "kb", KB)
    write_plugin(tmp_path / "incoming", "counter", COUNTER, ("state",))
    write_plugin(tmp_path / "secret", "evil", KB)
    os.symlink(tmp_path / "secret" / "evil", tmp_path / "incoming" / "link")
    pack(tmp_path / "incoming" / "counter", tmp_path / "incoming" / "counter.wxb")
    return tmp_path


def _json(result: types.CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def _text(result: types.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    return first.text


@pytest.mark.slow
def test_a_real_client_loads_a_plugin_that_gets_no_grant_until_the_operator_grants(
        site: Path) -> None:
    """The whole story on `wasmext mcp serve --manage` over stdio, the operator's
    `wasmext grant` run as a command and picked up by the running server's watcher."""
    params = StdioServerParameters(
        command=sys.executable, cwd=str(site), env=ENV,
        args=["-m", "wasmext_cli", "mcp", "serve", "--config", "wasmext.toml", "--manage",
              "--poll", "0.2"])
    changes: list[float] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changes.append(time.monotonic())

    async def bump(client: Client) -> Any:
        return json.loads(_text(await client.call_tool("counter__bump", {})))

    async def main() -> None:
        async with Client(params, mode="legacy", message_handler=on_message,
                          read_timeout_seconds=TIMEOUT) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert set(MANAGE_TOOLS) <= names and "kb__lookup" in names
            listed = _json(await client.call_tool("wasmext_plugins_list", {}))
            assert [p["id"] for p in listed["plugins"]] == ["kb"]

            # Paths the operator did not allow: refused, and no host path in the answer.
            for path in ("/etc", "../secret/evil", str(site / "secret" / "evil"), "link",
                         "missing"):
                refused = await client.call_tool("wasmext_plugin_load", {"path": path})
                assert refused.is_error and _text(refused).startswith("refused: ")
                assert str(site) not in _text(refused)
            assert not (site / "plugins" / "evil").exists()

            loaded = _json(await client.call_tool("wasmext_plugin_load",
                                                  {"path": "counter"}))
            assert loaded["loaded"] and loaded["tools"] == ["counter__bump"]
            assert loaded["requested"] == ["state"] and loaded["granted"] == []
            with anyio.fail_after(10):
                while not changes:  # list_changed for the new tool
                    await anyio.sleep(0.05)
            assert "counter__bump" in {t.name for t in (await client.list_tools()).tools}

            answer = await bump(client)  # loaded over MCP: not granted what it asks for
            assert answer["ok"] is False and answer["error"]["code"] == "denied"
            grants = _json(await client.call_tool("wasmext_plugin_grants", {"id": "counter"}))
            assert grants["missing"] == ["state"]
            assert grants["operator"] == "wasmext grant counter state"

            # The operator grants; the running server picks it up (approvals.json watched).
            done = await anyio.to_thread.run_sync(lambda: subprocess.run(
                [sys.executable, "-m", "wasmext_cli", "grant", "counter", "state",
                 "--config", "wasmext.toml", "--by", "operator"], cwd=site, env=ENV,
                capture_output=True, text=True, timeout=TIMEOUT))
            assert done.returncode == 0, done.stderr
            with anyio.fail_after(20):
                while (answer := await bump(client))["ok"] is not True:
                    await anyio.sleep(0.2)
            grants = _json(await client.call_tool("wasmext_plugin_grants", {"id": "counter"}))
            assert grants["granted"] == ["state"] and grants["missing"] == []

            seen = len(changes)
            off = _json(await client.call_tool("wasmext_plugin_disable", {"id": "counter"}))
            assert off == {"id": "counter", "enabled": False, "loaded": False}
            with anyio.fail_after(10):
                while len(changes) == seen:
                    await anyio.sleep(0.05)
            assert "counter__bump" not in {t.name for t in (await client.list_tools()).tools}
            on = _json(await client.call_tool("wasmext_plugin_enable", {"id": "counter"}))
            assert on["loaded"] and on["granted"] == ["state"]  # the operator's grant holds
            assert (await bump(client))["ok"] is True

            again = await client.call_tool("wasmext_plugin_load", {"path": "counter.wxb"})
            assert again.is_error and "already installed" in _text(again)
            assert str(site) not in _text(again)
            bad = await client.call_tool("wasmext_plugin_enable", {"id": "../x"})
            assert bad.is_error and _text(bad).startswith("invalid: ")

    async def bounded() -> None:
        with anyio.fail_after(TIMEOUT * 3):
            await main()
    anyio.run(bounded)


def test_over_streamable_http_a_load_is_denied_until_granted(site: Path) -> None:
    """The same over streamable HTTP in this process (the default tier's real client)."""
    config = load_config(site / "wasmext.toml")
    with Host(config) as host:
        port = free_port()
        server = build_http_server(host, "127.0.0.1", port, poll_interval=0.05,
                                   manage=config.manage)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        for _ in range(TIMEOUT * 100):
            if server.started or not thread.is_alive():
                break
            time.sleep(0.01)
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy",
                              message_handler=on_message,
                              read_timeout_seconds=TIMEOUT) as client:
                await client.list_tools()
                loaded = _json(await client.call_tool("wasmext_plugin_load",
                                                      {"path": "counter.wxb"}))
                assert loaded["granted"] == []
                with anyio.fail_after(10):
                    await changed.wait()
                result = json.loads(_text(await client.call_tool("counter__bump", {})))
                assert result["error"]["code"] == "denied"

                lp = host.plugins["counter"]  # the operator's act, as `wasmext grant` does
                subject = subject_of(f"sha256:{lp.plugin.module.info.digest}", lp.manifest)
                ApprovalStore.in_data_dir(config.data_dir).grant("counter", subject,
                                                                 ["state"], "operator")
                await anyio.to_thread.run_sync(host.rescan)  # what the watcher does
                result = json.loads(_text(await client.call_tool("counter__bump", {})))
                assert result["ok"] is True

                ApprovalStore.in_data_dir(config.data_dir).revoke("counter")  # and back
                await anyio.to_thread.run_sync(host.rescan)
                result = json.loads(_text(await client.call_tool("counter__bump", {})))
                assert result["error"]["code"] == "denied"

        try:
            async def bounded() -> None:
                with anyio.fail_after(TIMEOUT):
                    await main()
            anyio.run(bounded)
        finally:
            server.should_exit = True
            thread.join(TIMEOUT)


def test_without_manage_no_management_tool_is_served(tmp_path: Path) -> None:
    with make_host((KB, {"plugin_id": "kb"})) as host:
        plain = McpToolServer(host)
        assert [t.name for t in plain.visible_tools()] == ["kb__lookup"]
        managed = McpToolServer(host, manage=ManageSettings(enabled=True))
        assert {t.name for t in managed.visible_tools()} == {"kb__lookup", *MANAGE_TOOLS}
        # Plugins never reach them: they are not in the registry tool.call uses.
        assert not set(MANAGE_TOOLS) & set(host.tools.tools)


@pytest.fixture
def manager(site: Path) -> Iterator[tuple[Manager, Host]]:
    config = load_config(site / "wasmext.toml")
    with Host(config) as host:
        yield Manager(host, config.manage), host


def test_a_bundle_loads_with_no_grant(manager: tuple[Manager, Host], site: Path) -> None:
    mgr, host = manager
    out = mgr.load({"path": str(site / "incoming" / "counter.wxb")})
    assert out["loaded"] and out["granted"] == [] and host.plugins["counter"].plugin.grants \
        == frozenset()
    assert (site / "plugins" / "counter" / "counter.wasm").is_file()


def test_config_grants_for_other_bytes_do_not_apply(site: Path) -> None:
    """A [grants.ID] pinned to another module grants the MCP-loaded one nothing."""
    with (site / "wasmext.toml").open("a") as fh:
        fh.write(f'[grants.counter]\ndigest = "sha256:{"0" * 64}"\ncapabilities = ["state"]\n')
    config = load_config(site / "wasmext.toml")
    with Host(config) as host:
        out = Manager(host, config.manage).load({"path": "counter"})
        assert out["loaded"] and out["granted"] == []


@pytest.mark.parametrize("path", ["/etc/passwd", "../secret/evil", "link", "link/plugin.toml",
                                  "counter/../../secret/evil", "a\x00b"])
def test_paths_outside_the_allowed_folders_are_refused(manager: tuple[Manager, Host],
                                                       site: Path, path: str) -> None:
    mgr, host = manager
    with pytest.raises(ManageRefused):
        mgr.load({"path": path})
    assert "evil" not in host.plugins and not (site / "plugins" / "evil").exists()


def test_a_link_inside_a_plugin_folder_is_not_followed(manager: tuple[Manager, Host],
                                                       site: Path) -> None:
    mgr, host = manager
    sneaky = site / "incoming" / "sneaky"
    write_plugin(site / "incoming", "sneaky", KB)
    (sneaky / "README.md").symlink_to(site / "secret" / "evil" / "plugin.toml")
    with pytest.raises(ManageRefused, match=r"README\.md"):
        mgr.load({"path": "sneaky"})
    os.unlink(sneaky / "README.md")
    os.link(site / "secret" / "evil" / "plugin.toml", sneaky / "README.md")
    with pytest.raises(ManageRefused, match="hard link"):
        mgr.load({"path": "sneaky"})
    assert "sneaky" not in host.plugins


def test_reading_through_a_swapped_folder_link_is_refused(tmp_path: Path) -> None:
    """The real path of what was opened is checked, not the name: a folder that became a
    link out after any earlier check is caught on the open descriptor."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "f").write_bytes(b"secret")
    (allowed / "d").symlink_to(outside)
    with pytest.raises(ManageRefused, match="outside"):
        read_confined(allowed / "d" / "f", [allowed], 100)
    (allowed / "g").write_bytes(b"x" * 101)
    with pytest.raises(ManageRefused, match="over 100 bytes"):
        read_confined(allowed / "g", [allowed], 100)
    os.mkfifo(allowed / "fifo")
    started = time.monotonic()
    with pytest.raises(ManageRefused, match="not a regular file"):
        read_confined(allowed / "fifo", [allowed], 100)
    assert time.monotonic() - started < 3


def test_no_sources_or_no_install_folder_refuses_loads(tmp_path: Path) -> None:
    config = HostConfig(data_dir=tmp_path / ".wasmext", workspace_dir=tmp_path / "plugins")
    with Host(config) as host, \
            pytest.raises(ManageRefused, match="no folder to load plugins from"):
        Manager(host, ManageSettings(enabled=True)).load({"path": "x"})
    with Host(HostConfig(data_dir=tmp_path / ".wasmext"), plugin_dirs=[]) as host, \
            pytest.raises(ManageRefused, match="no workspace plugin folder"):
        Manager(host, ManageSettings(True, (tmp_path,))).load({"path": "x"})


@pytest.mark.slow
def test_the_docs_example_prints_what_the_doc_shows(built: Built) -> None:
    built["relay-tools"]
    text = (ROOT / "docs" / "mcp-manage.md").read_text(encoding="utf-8")
    block = re.search(r"\$ python docs/manage_example.py\n(.*?)```", text, flags=re.S)
    assert block is not None
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "manage_example.py")],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == block.group(1).splitlines()


def test_a_required_signature_holds_for_loads_and_replace_is_asked_for(site: Path) -> None:
    public = generate_key(site / "release.pem")
    with (site / "wasmext.toml").open("a") as fh:
        fh.write(f'[trust]\nrequire_signature = true\nkeys = ["{public}"]\n')
    config = load_config(site / "wasmext.toml")
    with Host(config) as host:
        mgr = Manager(host, config.manage)
        with pytest.raises(SignatureRequired):
            mgr.load({"path": "counter"})  # a folder is never signed
        assert not (site / "plugins" / "counter").exists()
        sign_bundle(site / "incoming" / "counter.wxb", site / "release.pem")
        assert mgr.load({"path": "counter.wxb"})["loaded"]
        with pytest.raises(BundleError, match="already installed"):
            mgr.load({"path": "counter.wxb"})
        again = mgr.load({"path": "counter.wxb", "replace": True})
        assert again["loaded"] and again["granted"] == []


@pytest.mark.slow
def test_the_command_line_flags_turn_the_tools_on(site: Path) -> None:
    """`--manage --manage-source DIR` on a config without [manage]: the tools are served
    and a load from DIR works; a client of a server without the flag sees none."""
    (site / "wasmext.toml").write_text('[host]\ndata_dir = ".wasmext"\n'
                                       '[plugins]\nworkspace_dir = "plugins"\n')
    base = [sys.executable, "-m", "wasmext_cli", "mcp", "serve", "--config", "wasmext.toml",
            "--no-watch", "--poll", "0"]

    async def main() -> None:
        flags = ["--manage", "--manage-source", str(site / "incoming")]
        async with Client(StdioServerParameters(command=base[0], args=base[1:] + flags,
                                                cwd=str(site), env=ENV),
                          read_timeout_seconds=TIMEOUT) as client:
            assert set(MANAGE_TOOLS) <= {t.name for t in (await client.list_tools()).tools}
            loaded = _json(await client.call_tool("wasmext_plugin_load",
                                                  {"path": "counter.wxb"}))
            assert loaded["tools"] == ["counter__bump"] and loaded["granted"] == []
        async with Client(StdioServerParameters(command=base[0], args=base[1:], cwd=str(site),
                                                env=ENV),
                          read_timeout_seconds=TIMEOUT) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"counter__bump", "kb__lookup"}

    async def bounded() -> None:
        with anyio.fail_after(TIMEOUT * 3):  # two server processes on a shared machine
            await main()
    anyio.run(bounded)


def test_a_plugin_that_does_not_load_is_reported_without_host_paths(
        manager: tuple[Manager, Host], site: Path) -> None:
    mgr, host = manager
    broken = site / "incoming" / "broken"
    broken.mkdir()
    (broken / "plugin.toml").write_text('id = "broken"\nversion = "0.1.0"\nabi = 1\n')
    (broken / "broken.wasm").write_bytes(b"\0asm\x01\0\0\0garbage")
    out = mgr.load({"path": "broken"})
    assert out["loaded"] is False and "broken" not in host.plugins
    assert "does not compile" in out["error"] or "invalid" in out["error"].lower()
    assert str(site) not in out["error"]
    assert host.plugins["kb"].plugin.call("on_tool", {"name": "lookup"}).value == {"found": 1}


def test_a_manifests_capabilities_reach_the_client_inert_and_never_as_a_shell_line(
        manager: tuple[Manager, Host], site: Path, tmp_path: Path) -> None:
    # The manifest is the plugin's: what it asks for is shown to the client, and the
    # `operator` line is one an agent or a person may paste into a shell.
    mgr, host = manager
    pwned = tmp_path / "pwned"
    asks = ("state", f"http:x; touch {pwned} #", "http:*", "tool:a\x1b]0;T\x07\x1b[2J",
            "http:" + "A" * 5000, "bogus$(id)", *(f"tool:t{i}" for i in range(300)))
    write_plugin(site / "incoming", "asker", KB, asks)
    started = time.monotonic()
    out = mgr.load({"path": "asker"})
    answer = mgr.grants({"id": "asker"})
    listed = next(p for p in mgr.list_plugins({})["plugins"] if p["id"] == "asker")
    assert time.monotonic() - started < TIMEOUT
    for shown in (out["requested"], answer["requested"], answer["missing"],
                  listed["requested"]):
        assert 0 < len(shown) <= 64
        assert all(len(c) <= 200 and "\x1b" not in c and "\x07" not in c for c in shown)
    words = __import__("shlex").split(answer["operator"])
    assert words[:3] == ["wasmext", "grant", "asker"]
    assert "state" in words and "http:*" in words and f"http:x; touch {pwned} #" in words
    assert not any("\x1b" in w or "$(" in w or len(w) > 200 for w in words)
    subprocess.run(["sh", "-c", answer["operator"].replace("wasmext", "true", 1)], check=True)
    assert not pwned.exists()
    assert host.plugins["kb"].plugin.call("on_tool", {"name": "lookup"}).value == {"found": 1}
