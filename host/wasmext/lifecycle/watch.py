"""An opt-in watcher that calls `host.rescan()` when plugins or their state change.

    with PluginWatcher(host):        # rescans on changes until closed
        serve(host)

It watches the plugin directories and the data dir (where `plugins.json`,
the enable state, and `approvals.json` live) with `watchfiles` (the
`lifecycle` extra) and rescans after each batch of changes. Without
`watchfiles` it looks every `interval` seconds at the names, sizes and
modification times of the same files and rescans when they differ (so a
broken folder is not reported again and again). A rescan that fails is logged;
the watcher keeps going.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wasmext.host import Host

__all__ = ["PluginWatcher"]

log = logging.getLogger("wasmext.watch")
WATCHED_DATA_FILES = {"plugins.json", "approvals.json"}


class PluginWatcher:
    """Rescans `host` on file changes (watchfiles) or every `interval` seconds."""

    def __init__(self, host: Host, *, interval: float = 2.0, debounce_ms: int = 200,
                 use_watchfiles: bool = True) -> None:
        self.host = host
        self.interval = interval
        self.debounce_ms = debounce_ms
        self.rescans = 0
        self._data = Path(host.config.data_dir).resolve()
        self._stop = threading.Event()
        self.mode = "poll"
        if use_watchfiles:
            try:
                import watchfiles  # noqa: F401
                self.mode = "watchfiles"
            except ImportError:
                log.info("watchfiles is not installed: rescanning every %.1f s", interval)
        # Taken before the thread starts, so a change made as soon as the constructor
        # returns is seen: the poll compares against it, and the watchfiles mode
        # compares once its watch is up, which may be after that change.
        self._baseline = self.fingerprint()
        self._thread = threading.Thread(target=self._run, name="wasmext-watch", daemon=True)
        self._thread.start()

    def paths(self) -> list[Path]:
        """The folders watched: the data dir and each existing plugin folder."""
        self._data.mkdir(parents=True, exist_ok=True)  # watched before any enable/disable
        return [self._data] + [d for _, d in self.host.plugin_dirs if d.is_dir()]

    def _relevant(self, _change: object, path: str) -> bool:
        # The data dir also holds state.db: its writes must not cause rescans.
        where = Path(path)
        if where.parent == self._data:
            return where.name in WATCHED_DATA_FILES
        return not where.name.startswith(".")  # an install's temporary folder

    def _rescan(self) -> None:
        try:
            self.host.rescan()
            self.rescans += 1
        except Exception:  # the watcher outlives any one bad rescan
            log.exception("rescan failed")

    def _run(self) -> None:
        if self.mode == "watchfiles":
            import watchfiles

            try:
                gap_checked = False
                for changes in watchfiles.watch(*self.paths(), stop_event=self._stop,
                                                watch_filter=self._relevant,
                                                debounce=self.debounce_ms,
                                                rust_timeout=500, yield_on_timeout=True,
                                                raise_interrupt=False):
                    if changes:
                        gap_checked = True  # this rescan reads whatever the gap changed
                        self._rescan()
                    elif not gap_checked:
                        # The watch is up (it timed out once): what changed before it
                        # was, it never reports.
                        gap_checked = True
                        if self.fingerprint() != self._baseline:
                            self._rescan()
                return
            except Exception:
                log.exception("watchfiles failed; rescanning every %.1f s", self.interval)
        seen = self._baseline
        while not self._stop.wait(self.interval):
            now = self.fingerprint()
            if now != seen:
                seen = now
                self._rescan()

    def fingerprint(self) -> frozenset[tuple[str, int, int]]:
        """(path, size, mtime) of every file a rescan reads."""
        files = [self._data / name for name in WATCHED_DATA_FILES]
        for _, directory in self.host.plugin_dirs:
            try:
                folders = [p for p in directory.iterdir() if not p.name.startswith(".")]
            except OSError:
                continue
            for folder in folders:
                try:
                    files.extend(folder.iterdir() if folder.is_dir() else [folder])
                except OSError:
                    continue
        out = set()
        for path in files:
            try:
                st = path.stat()
            except OSError:
                continue
            out.add((str(path), st.st_size, st.st_mtime_ns))
        return frozenset(out)

    def close(self) -> None:
        """Stop the watcher thread."""
        self._stop.set()
        self._thread.join(5.0)

    def __enter__(self) -> PluginWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
