"""Resident memory of one more copy of a plugin, beside one more instance of it.

Measured in a fresh interpreter (the benchmark's own process has allocated and
freed too much to attribute a page to anything): load one copy of a plugin
folder, then `N` more copies under other ids, then `N` more instances of the
first copy (each registered, as a copy's first instance is). Each copy is
called once, so that one whose registration was shared has started its
instance too. The figures are the resident-set growth per serving copy and per
instance; identical copies share the compiled code, so a copy should cost about
what an instance costs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["COPIES", "RSS_AT_MOST", "measure"]

RSS_AT_MOST = 1.5  # a copy about an instance: copy RSS / instance RSS

COPIES = 40

_SCRIPT = """
import gc, json, os, sys
from pathlib import Path
from wasmext import CompileCache, Runtime

def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

folder, cache, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
with Runtime(cache=CompileCache(cache / "modules", cache / "key")) as rt:
    first = rt.load(folder, plugin_id="copy-0")
    first.call("on_plain_text", "warm up")
    before = rss()
    copies = [rt.load(folder, plugin_id=f"copy-{i}") for i in range(1, n + 1)]
    for copy in copies:  # a shareable copy starts its instance at its first call
        copy.call("on_plain_text", "warm up")
    after_copies = rss()
    instances = [first.new_instance() for _ in range(n)]
    after_instances = rss()
    print(json.dumps({"copy": (after_copies - before) / n,
                      "instance": (after_instances - after_copies) / n}))
"""


def measure(folder: Path, cache_dir: Path, root: Path) -> dict[str, float] | None:
    """{"copy": bytes per extra copy, "instance": bytes per extra instance}, or None
    where /proc/self/statm does not exist (not Linux)."""
    if not Path("/proc/self/statm").is_file():
        return None
    env = {**os.environ, "PYTHONPATH": f"{root / 'host'}:{root / 'cli'}"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(folder), str(cache_dir),
                           str(COPIES)], env=env, capture_output=True, text=True, check=True)
    figure: dict[str, float] = json.loads(proc.stdout)
    return figure
