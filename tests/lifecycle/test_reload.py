"""Rescan and hot reload: new, changed, removed, enabled and disabled plugins while
serving; a reload under load answers every call with the old or the new version."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from lc_support import module, write_plugin

from support import run_in_threads
from wasmext import Host, HostConfig
from wasmext.config import Grant
from wasmext.files import atomic_write
from wasmext.lifecycle.watch import PluginWatcher


def _host(tmp_path: Path, **config: object) -> Host:
    cfg = HostConfig(data_dir=tmp_path / "data", workspace_dir=tmp_path / "plugins",
                     **config)  # type: ignore[arg-type]
    return Host(cfg)


def test_rescan_follows_folders_and_enable_state(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "one", "v1", tools=["find"])
    with _host(tmp_path) as host:
        host.add(module("code"), plugin_id="by-code")  # added by code: rescan leaves it
        assert set(host.plugins) == {"one", "by-code"}
        assert host.try_call("one", "test", None)[0].value == "v1"  # type: ignore[union-attr]

        write_plugin(plugins, "two", "v1")
        report = host.rescan()
        assert report.added == ["two"] and not report.reloaded and not report.removed

        atomic_write(plugins / "one" / "one.wasm", module("v2", tools=["find", "more"]))
        report = host.rescan()
        assert report.reloaded == ["one"]
        assert host.try_call("one", "test", None)[0].value == "v2"  # type: ignore[union-attr]
        assert {"one__find", "one__more"} <= set(host.tools.tools)
        assert host.tools.tools["one__find"].description == "find v2"

        assert host.rescan().changed is False  # nothing changed: nothing reloaded

        atomic_write(plugins / "one" / "one.wasm", module("v3", tools=["more"]))
        assert host.rescan().reloaded == ["one"]
        assert [n for n in host.tools.tools if n.startswith("one__")] == ["one__more"]
        atomic_write(plugins / "one" / "one.wasm", module("v4"))  # no tools at all now
        assert host.rescan().reloaded == ["one"]
        assert not any(n.startswith("one__") for n in host.tools.tools)

        # Another process disables "two" (a second host over the same data dir).
        with _host(tmp_path) as other:
            other.enable_state.set("two", False)
        assert host.rescan().removed == ["two"]
        with _host(tmp_path) as other:
            other.enable_state.set("two", True)
        assert host.rescan().added == ["two"]

        import shutil
        shutil.rmtree(plugins / "one")
        assert host.rescan().removed == ["one"]
        assert not any(n.startswith("one__") for n in host.tools.tools)
        assert set(host.plugins) == {"two", "by-code"}
        assert set(host.runtime.plugins) == {"two", "by-code"}  # nothing of "one" is kept


def test_a_broken_new_version_keeps_the_old_one_serving(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "one", "v1")
    with _host(tmp_path) as host:
        (plugins / "one" / "one.wasm").write_bytes(b"\0asm garbage")
        report = host.rescan()
        assert report.reloaded == [] and report.errors
        assert report.errors[-1].plugin_id == "one"
        assert host.try_call("one", "test", None)[0].value == "v1"  # type: ignore[union-attr]
        (plugins / "one" / "plugin.toml").write_text('id = "one"\nversion = ')  # mid-edit
        report = host.rescan()
        assert report.removed == [] and report.errors
        assert host.try_call("one", "test", None)[0].value == "v1"  # type: ignore[union-attr]
        write_plugin(plugins, "one", "v2")  # the edit is finished
        assert host.rescan().reloaded == ["one"]
        assert host.try_call("one", "test", None)[0].value == "v2"  # type: ignore[union-attr]


def test_reload_under_load_answers_every_call(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "hot", "v1", tools=["find"])
    versions = [module(f"v{i}", tools=["find"]) for i in range(1, 4)]
    with _host(tmp_path) as host:
        stop = threading.Event()
        answers: list[list[str]] = [[] for _ in range(4)]
        failures: list[str] = []

        def caller(i: int) -> None:  # half call the hook, half the tool
            while not stop.is_set():
                if i % 2:
                    result, error = host.try_call("hot", "test", None)
                    if result is None:
                        failures.append(str(error))
                    else:
                        answers[i].append(result.value)
                else:
                    out = host.tools.execute("hot__find", {"q": "x"})
                    if out["status"] != "ok":
                        failures.append(str(out))
                    else:
                        answers[i].append(out["output"])

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        reloads = 0
        for n in range(12):
            atomic_write(plugins / "hot" / "hot.wasm", versions[n % 3])
            reloads += len(host.rescan().reloaded)
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join(30)
    assert failures == []
    assert reloads >= 11  # every replacement after the first write is a new digest
    seen = {v for a in answers for v in a}
    assert seen <= {"v1", "v2", "v3"} and len(seen) >= 2
    assert all(answers), "every caller got answers"


def test_grants_are_checked_again_against_the_new_digest(tmp_path: Path) -> None:
    import hashlib

    plugins = tmp_path / "plugins"
    write_plugin(plugins, "kb", "v1")
    digest = "sha256:" + hashlib.sha256(module("v1")).hexdigest()
    with _host(tmp_path, grants={"kb": Grant(digest, frozenset({"state"}))}) as host:
        assert "state" in host.plugins["kb"].plugin.grants
        atomic_write(plugins / "kb" / "kb.wasm", module("v2"))
        assert host.rescan().reloaded == ["kb"]
        assert "state" not in host.plugins["kb"].plugin.grants  # withheld until renewed


def test_watcher_rescans_on_file_changes(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "one", "v1")
    for use_watchfiles in (True, False):
        with _host(tmp_path) as host, PluginWatcher(host, interval=0.1,
                                                    use_watchfiles=use_watchfiles) as w:
            assert w.mode == ("watchfiles" if use_watchfiles else "poll")
            write_plugin(plugins, f"new-{int(use_watchfiles)}", "v1")
            deadline = time.monotonic() + 20
            while f"new-{int(use_watchfiles)}" not in host.plugins:
                assert time.monotonic() < deadline, "the watcher never rescanned"
                time.sleep(0.05)
            if not use_watchfiles:  # polling rescans only when a file changed
                time.sleep(0.3)
                settled = w.rescans
                time.sleep(0.5)
                assert w.rescans == settled


def test_a_change_before_the_watch_is_up_is_not_lost(tmp_path: Path) -> None:
    """A plugin written after the watcher was made but before watchfiles set up its
    watch (the thread starts it a moment later) is loaded all the same."""
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "one", "v1")

    class Late(PluginWatcher):
        def paths(self) -> list[Path]:  # the watch starts right after this
            write_plugin(plugins, "early", "v1")
            return super().paths()

    with _host(tmp_path) as host, Late(host, use_watchfiles=True) as w:
        assert w.mode == "watchfiles"
        deadline = time.monotonic() + 10
        while "early" not in host.plugins:
            assert time.monotonic() < deadline, "the change before the watch was lost"
            time.sleep(0.05)


def test_concurrent_rescans_are_serialised(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "one", "v1")
    with _host(tmp_path) as host:
        atomic_write(plugins / "one" / "one.wasm", module("v2"))
        reloaded: list[str] = []
        errors = run_in_threads(lambda i: reloaded.extend(host.rescan().reloaded), 4)
        assert errors == [] and reloaded == ["one"]
