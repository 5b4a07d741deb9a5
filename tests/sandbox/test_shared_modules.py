"""Identical modules share one compiled module per engine; each load keeps its own checks."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import wasmtime

from wasmext import CompileCache, ModuleTooLarge, Runtime
from wasmext.sandbox import module as module_mod
from wasmext.sandbox.engine import EngineConfig, shared_engine
from wasmext.sandbox.wasmcheck import ModuleCaps
from wasmext.testing import guest_wat


def _wasm(tag: str = "a") -> bytes:
    return bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": tag})))


def test_identical_bytes_share_one_compiled_module() -> None:
    with Runtime(cache=False) as rt:
        a = rt.load(_wasm(), plugin_id="one")
        b = rt.load(_wasm(), plugin_id="two")
        c = rt.load(_wasm("b"), plugin_id="three")
        assert a.module.module is b.module.module
        assert a.module.pre is b.module.pre
        assert c.module.module is not a.module.module
        assert a.call("test", None).value == b.call("test", None).value == "a"


def test_another_engine_config_compiles_its_own() -> None:
    other = EngineConfig(cranelift_opt_level="none")
    with Runtime(cache=False) as rt, Runtime(cache=False, engine=other) as rt2:
        a = rt.load(_wasm(), plugin_id="one")
        b = rt2.load(_wasm(), plugin_id="one")
        assert a.module.module is not b.module.module
        assert b.module.engine is shared_engine(other)


def test_instances_of_shared_code_keep_their_own_memory() -> None:
    with Runtime(cache=False) as rt:
        a = rt.load(_wasm(), plugin_id="one")
        b = rt.load(_wasm(), plugin_id="two")
        ia, ib = a._borrow(), b._borrow()
        assert ia.memory.write(100, b"only-a")
        assert ib.memory.read(100, 6) != b"only-a"
        assert ia.memory.read(100, 6) == b"only-a"


def test_each_runtime_applies_its_own_caps_to_shared_code() -> None:
    wasm = _wasm()
    with Runtime(cache=False) as rt:
        rt.load(wasm, plugin_id="one")  # compiled and shared
        strict = Runtime(cache=False, module_caps=ModuleCaps(max_module_bytes=16))
        with strict, pytest.raises(ModuleTooLarge, match="max_module_bytes"):
            strict.load(wasm, plugin_id="two")
        assert rt.plugins["one"].call("test", None).value == "a"  # still healthy


def test_the_shared_entry_goes_with_its_last_plugin() -> None:
    wasm = _wasm("gone")
    engine = shared_engine()
    with Runtime(cache=False) as rt:
        rt.load(wasm, plugin_id="one")
        digest = rt.plugins["one"].module.info.digest
        assert module_mod._lookup(engine, digest) is not None
    del rt
    gc.collect()
    assert module_mod._lookup(engine, digest) is None


def test_each_compile_cache_shares_its_own_loads(tmp_path: Path) -> None:
    wasm = _wasm("cached")
    first = CompileCache(tmp_path / "one", tmp_path / "one.key")
    second = CompileCache(tmp_path / "two", tmp_path / "two.key")
    with Runtime(cache=first) as rt, Runtime(cache=second) as rt2:
        a = rt.load(wasm, plugin_id="one")
        b = rt.load(wasm, plugin_id="two")
        c = rt2.load(wasm, plugin_id="one")
        assert a.module.module is b.module.module
        assert c.module.module is not a.module.module
        # Each cache wrote its own entry: the disk cache works as it did.
        assert (first.misses, second.misses) == (1, 1)
        assert list((tmp_path / "two").glob("*.cwasm"))


def test_a_file_loaded_again_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "same.wasm"
    path.write_bytes(_wasm("first"))
    with Runtime(cache=False) as rt:
        a = rt.load(path, plugin_id="one")
        b = rt.load(path, plugin_id="two")
        assert b.module is a.module  # the same file, unchanged: not read or hashed again
        path.write_bytes(_wasm("second"))  # rewritten in place: another size and times
        c = rt.load(path, plugin_id="three")
        assert c.module is not a.module and c.call("test", None).value == "second"
        other = tmp_path / "other.wasm"
        other.write_bytes(_wasm("third"))
        os.replace(other, path)  # renamed over it: another inode
        d = rt.load(path, plugin_id="four")
        assert d.call("test", None).value == "third"
        path.write_bytes(_wasm("fifth"))  # in place, the same size: its times changed
        e = rt.load(path, plugin_id="five")
        assert e.call("test", None).value == "fifth"
        assert a.call("test", None).value == "first"  # loaded plugins keep their code
