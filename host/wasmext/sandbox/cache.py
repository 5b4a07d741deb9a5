"""On-disk cache of compiled modules that never trusts what it did not write.

Deserialising compiled code is equivalent to running it, so each entry is
authenticated with an HMAC under a host key kept outside the cache folder.
An entry that fails the check, or that wasmtime refuses, is deleted and the
module is compiled again. Entries are keyed by the module's content digest,
the wasmtime version and the engine configuration, and the MAC covers that key
(the entry's name) with the compiled code: an authentic entry of one module
copied over another's is refused, so a module approved by its digest never runs
another module's code.

`wasmext build` fills the cache with what it built (`contains` tells whether an
entry is there), so the first load after a build reads compiled code. A cold
compile can take a minute for a componentized interpreter: `on_compile`, when
set, wraps each one (the CLI shows a spinner naming the module). Processes sharing
a cache compile each entry once: a miss takes the entry's lock file, and a process
that waited on it reads what the first one stored.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import logging
import os
import secrets
import shutil
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import wasmtime

from wasmext.errors import UnsafeFile
from wasmext.files import atomic_write, read_regular
from wasmext.sandbox.engine import SharedEngine

__all__ = ["CompileCache", "CompileObserver", "default_cache_dir", "observe_compiles"]

log = logging.getLogger("wasmext.sandbox.cache")
MAGIC = b"WXC2"  # WXC1 entries had a MAC of the code alone
MAC_LEN = 32
MAX_ENTRY_BYTES = 2**31  # far above any compiled module the compile caps admit
if TYPE_CHECKING:  # wasmtime.component comes with the first component, not the host
    import wasmtime.component

    T = TypeVar("T", wasmtime.Module, wasmtime.component.Component)  # what the cache holds
else:
    T = TypeVar("T")
# Wraps a cold compile; hears the module's name (a path or "<module>").
CompileObserver = Callable[[str], AbstractContextManager[object]]


def default_cache_dir() -> Path:
    """The compile cache folder: XDG_CACHE_HOME (or ~/.cache)/wasmext/modules."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wasmext" / "modules"


def _atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    atomic_write(path, data, mode)


def _silent(_name: str) -> AbstractContextManager[object]:
    return nullcontext()


_observer: list[CompileObserver] = []  # the process's, for caches that set none


def observe_compiles(observer: CompileObserver | None) -> None:
    """Wrap every cold compile of every cache in this process that has no `on_compile`
    of its own with `observer` (None: stop). The CLI's spinner on a terminal."""
    _observer[:] = [observer] if observer is not None else []


@contextlib.contextmanager
def _entry_lock(path: Path) -> Iterator[None]:
    """Hold `path`'s lock file while compiling it, so processes sharing the cache do not
    compile the same entry side by side; without a usable lock file, compile anyway."""
    fd = -1
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(path.name + ".lock"),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        log.debug("compile cache lock not taken (%s); compiling unlocked", exc)
    try:
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # closing releases the lock


class CompileCache:
    """Compiled modules on disk, authenticated with a per-host key."""

    def __init__(self, directory: Path | None = None, key_file: Path | None = None) -> None:
        self.directory = directory or default_cache_dir()
        self.key_file = key_file or self.directory.parent / "cache.key"
        self.hits = 0
        self.misses = 0
        self.rejected = 0
        self.on_compile: CompileObserver | None = None
        self._key: bytes | None = None
        # Modules loaded through this cache and still in use, shared in memory
        # (sandbox.module): each cache keeps its own, so its disk entries are
        # written and read as before.
        self.in_memory: weakref.WeakKeyDictionary[SharedEngine, weakref.WeakValueDictionary[
            str, Any]] = weakref.WeakKeyDictionary()

    def _host_key(self) -> bytes:
        """The host key; OSError when it can be neither read nor made."""
        if self._key is None:
            self.key_file.parent.mkdir(parents=True, exist_ok=True)
            try:
                key = read_regular(self.key_file, 32)
            except FileNotFoundError:
                key = b""
            except UnsafeFile as exc:
                if not exc.too_large:  # a FIFO or device: refused, the cache stays off
                    raise
                key = b""
            if len(key) != 32:
                key = secrets.token_bytes(32)
                _atomic_write(self.key_file, key)
            self._key = key
        return self._key

    def entry_path(self, digest: str, engine: SharedEngine) -> Path:
        """Where the compiled module of a digest for this engine is cached."""
        name = hashlib.sha256(f"{digest}:{engine.fingerprint}".encode()).hexdigest()
        return self.directory / f"{name}.cwasm"

    def component_entry_path(self, digest: str, engine: SharedEngine) -> Path:
        """Where the compiled component of a digest for this engine is cached."""
        return self.entry_path(digest, engine).with_suffix(".component.cwasm")

    def contains(self, digest: str, engine: SharedEngine, component: bool = False) -> bool:
        """Is there an entry for this digest and engine? (Not yet authenticated: a load
        still checks it and recompiles what fails.)"""
        path = (self.component_entry_path if component else self.entry_path)(digest, engine)
        try:
            return path.is_file()
        except OSError:
            return False

    def load_or_compile(self, wasm: bytes, digest: str, engine: SharedEngine,
                        name: str = "<module>",
                        compile_it: Callable[[], wasmtime.Module] | None = None
                        ) -> wasmtime.Module:
        """The compiled module for `wasm`, from the cache when it is authentic, else
        `compile_it()` (by default `engine.compile(wasm)`).

        Any unexpected state of the cache (a key or entry that is a directory,
        unreadable, a dangling link, a folder that is a file, ...) means
        "compile it", never an error: the cache only ever saves time.
        """
        return self._load_or_compile(self.entry_path(digest, engine), engine,
                                     wasmtime.Module.deserialize,
                                     compile_it or (lambda: engine.compile(wasm)), name)

    def load_or_compile_component(
            self, wasm: bytes, digest: str, engine: SharedEngine, name: str = "<component>",
            compile_it: Callable[[], wasmtime.component.Component] | None = None,
    ) -> wasmtime.component.Component:
        """`load_or_compile` for a component (the same key, MAC and fallbacks)."""
        import wasmtime.component

        return self._load_or_compile(self.component_entry_path(digest, engine), engine,
                                     wasmtime.component.Component.deserialize,
                                     compile_it or (lambda: engine.compile_component(wasm)),
                                     name)

    def _load_or_compile(self, path: Path, engine: SharedEngine,
                         deserialize: Callable[[wasmtime.Engine, bytes], T],
                         compile_it: Callable[[], T], name: str) -> T:
        try:
            compiled = self._load(path, engine, deserialize)
        except Exception as exc:
            log.warning("compile cache unusable (%s: %s); compiling", type(exc).__name__, exc)
            compiled = None
        if compiled is not None:
            self.hits += 1
            return compiled
        with _entry_lock(path):
            # Another process may have compiled it while this one waited for the lock.
            with contextlib.suppress(Exception):
                compiled = self._load(path, engine, deserialize)
            if compiled is not None:
                self.hits += 1
                return compiled
            self.misses += 1
            observer = self.on_compile or (_observer[0] if _observer else _silent)
            with observer(name):
                compiled = compile_it()
            try:
                self._store(path, compiled)
            except Exception as exc:
                log.warning("compile cache not written (%s: %s)", type(exc).__name__, exc)
        return compiled

    def _mac(self, path: Path, payload: bytes) -> bytes:
        # The entry's name is its key (digest, wasmtime, engine): bound with the code.
        mac = hmac.new(self._host_key(), path.name.encode() + b"\0", hashlib.sha256)
        mac.update(payload)
        return mac.digest()

    def _load(self, path: Path, engine: SharedEngine,
              deserialize: Callable[[wasmtime.Engine, bytes], T]) -> T | None:
        try:
            if not path.is_file():
                if path.is_symlink() or path.exists():
                    self._reject(path, "not a regular file")
                return None
            blob = read_regular(path, MAX_ENTRY_BYTES)
        except OSError:
            return None
        head, mac, payload = blob[:4], blob[4:4 + MAC_LEN], blob[4 + MAC_LEN:]
        if head != MAGIC:  # another format (an older wasmext's entry) or not an entry
            self._reject(path, "not an entry of this wasmext's format")
            return None
        if not hmac.compare_digest(mac, self._mac(path, bytes(payload))):
            self._reject(path, "not written by this host for this module")
            return None
        try:
            return deserialize(engine.engine, bytes(payload))
        except wasmtime.WasmtimeError as exc:
            self._reject(path, f"wasmtime refused it: {exc}")
            return None

    def _reject(self, path: Path, why: str) -> None:
        self.rejected += 1
        log.warning("compile cache entry %s discarded (%s); recompiling", path.name, why)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("compile cache entry %s not removed (%s)", path.name, exc)

    def _store(self, path: Path, module: wasmtime.Module | wasmtime.component.Component) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            payload = bytes(module.serialize())
            _atomic_write(path, MAGIC + self._mac(path, payload) + payload)
        except OSError as exc:
            # A read-only or full disk costs a recompile next time, nothing more.
            log.warning("compile cache not written (%s)", exc)
