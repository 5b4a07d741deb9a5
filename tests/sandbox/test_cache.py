"""The compile cache: reused when authentic, never trusted otherwise."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import wasmtime

from wasmext import CompileCache, Runtime
from wasmext.sandbox.engine import shared_engine
from wasmext.testing import guest_wat

WASM = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "cached"})))


def make_cache(tmp_path: Path) -> CompileCache:
    return CompileCache(tmp_path / "modules", tmp_path / "key")


def only_entry(cache: CompileCache) -> Path:
    entries = list(cache.directory.glob("*.cwasm"))
    assert len(entries) == 1
    return entries[0]


def test_second_load_is_a_hit(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    with Runtime(cache=cache) as rt:
        rt.load(WASM, plugin_id="a")
        rt.load(WASM, plugin_id="b")  # shares the compiled module in memory: no disk read
        assert (cache.misses, cache.hits) == (1, 0)
        assert rt.plugins["b"].call("test").value == "cached"
    del rt
    gc.collect()  # the in-memory module is gone with its plugins: the next load reads disk
    with Runtime(cache=cache) as rt:
        assert rt.load(WASM, plugin_id="c").call("test").value == "cached"
    assert (cache.misses, cache.hits) == (1, 1)
    assert (tmp_path / "key").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("tamper", ["flip-payload", "foreign-file", "truncated", "other-key"])
def test_poisoned_entries_are_recompiled(tmp_path: Path, tamper: str) -> None:
    cache = make_cache(tmp_path)
    with Runtime(cache=cache) as rt:
        rt.load(WASM, plugin_id="a")
    entry = only_entry(cache)
    blob = bytearray(entry.read_bytes())
    if tamper == "flip-payload":
        blob[-100] ^= 0xFF
        entry.write_bytes(bytes(blob))
    elif tamper == "foreign-file":
        # A valid serialized module written by someone else, without our MAC.
        entry.write_bytes(wasmtime.Module(shared_engine().engine, WASM).serialize())
    elif tamper == "truncated":
        entry.write_bytes(bytes(blob[:50]))
    else:
        (tmp_path / "key").write_bytes(b"k" * 32)
    fresh = make_cache(tmp_path)
    with Runtime(cache=fresh) as rt:
        assert rt.load(WASM, plugin_id="a").call("test").value == "cached"
    assert fresh.rejected == 1 and fresh.hits == 0 and fresh.misses == 1
    # The recompiled entry is authentic again.
    again = make_cache(tmp_path)
    with Runtime(cache=again) as rt:
        rt.load(WASM, plugin_id="a")
    assert again.hits == 1


def test_unwritable_cache_still_loads(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = CompileCache(blocker / "modules", tmp_path / "key")
    with Runtime(cache=cache) as rt:
        assert rt.load(WASM, plugin_id="a").call("test").value == "cached"


def test_key_includes_engine_fingerprint(tmp_path: Path) -> None:
    from wasmext.sandbox.engine import EngineConfig

    cache = make_cache(tmp_path)
    a = cache.entry_path("d" * 64, shared_engine())
    b = cache.entry_path("d" * 64, shared_engine(EngineConfig(max_wasm_stack_bytes=256 * 1024)))
    assert a != b


def test_a_load_waits_for_a_compile_in_progress_then_reads_it(tmp_path: Path) -> None:
    """Processes sharing a cache compile an entry once: a miss waits on the entry's lock
    (held here as another process would while compiling) and then reads what was stored."""
    import fcntl
    import hashlib
    import os
    import threading

    engine = shared_engine()
    digest = hashlib.sha256(WASM).hexdigest()
    writer, reader = make_cache(tmp_path), make_cache(tmp_path)
    entry = writer.entry_path(digest, engine)
    entry.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(entry.with_name(entry.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    loaded: list[object] = []
    waiting = threading.Thread(
        target=lambda: loaded.append(reader.load_or_compile(WASM, digest, engine)))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive() and not loaded  # it waits rather than compiling too
    # The other compiler stores the entry, as it does under its lock, and lets go.
    writer._store(entry, wasmtime.Module(engine.engine, WASM))
    os.close(lock)
    waiting.join(10)
    assert loaded and (reader.misses, reader.hits) == (0, 1)
