"""Resident memory of one more copy of a plugin, beside one more instance of it.

Measured in a fresh interpreter (the benchmark's own process has allocated and
freed too much to attribute a page to anything): load one copy of a plugin
folder, then `N` more copies under other ids, then `N` more instances of the
first copy (each registered, as a copy's first instance is). Each copy is
called once, so that one whose registration was shared has started its
instance too, and so is each extra instance: a call touches pages registering
does not (the guest's heap and stack, and with the instance pool a page of its
table's slot). The figures are the resident-set growth per serving copy and per
serving instance (and per instance only registered); identical copies share the
compiled code, so a copy should cost about what an instance costs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["COPIES", "DISTINCT", "PLUGIN_ARGS", "RSS_AT_MOST", "RSS_PRELUDE", "measure",
           "measure_distinct", "run_rss_script"]

RSS_AT_MOST = 1.5  # a copy about an instance: copy RSS / instance RSS

COPIES = 40

# The start of every measuring script: rss() is the resident set now, after a collection.
RSS_PRELUDE = """
import gc, json, os, sys
from pathlib import Path

def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
"""
# A plugin folder, a compile cache folder and a count, as most scripts take them.
PLUGIN_ARGS = """
from wasmext import CompileCache, Runtime
folder, cache, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
"""


def run_rss_script(body: str, args: list[str], root: Path) -> dict[str, float] | None:
    """Run RSS_PRELUDE + `body` in a fresh interpreter that imports wasmext from `root`,
    and return the JSON object it prints; None where /proc/self/statm does not exist
    (not Linux)."""
    if not Path("/proc/self/statm").is_file():
        return None
    env = {**os.environ, "PYTHONPATH": f"{root / 'host'}:{root / 'cli'}"}
    proc = subprocess.run([sys.executable, "-c", RSS_PRELUDE + body, *args], env=env,
                          capture_output=True, text=True, check=True)
    figure: dict[str, float] = json.loads(proc.stdout)
    return figure


_SCRIPT = PLUGIN_ARGS + """
with Runtime(cache=CompileCache(cache / "modules", cache / "key")) as rt:
    first = rt.load(folder, plugin_id="copy-0")
    first.call("on_plain_text", "warm up")
    before = rss()
    copies = [rt.load(folder, plugin_id=f"copy-{i}") for i in range(1, n + 1)]
    for copy in copies:  # a shareable copy starts its instance at its first call
        copy.call("on_plain_text", "warm up")
    after_copies = rss()
    instances = [first.new_instance() for _ in range(n)]
    registered = rss()
    for instance in instances:  # serving, as each copy is
        instance.call("on_plain_text", "warm up")
    after_instances = rss()
    print(json.dumps({"copy": (after_copies - before) / n,
                      "instance": (after_instances - after_copies) / n,
                      "registered": (registered - after_copies) / n}))
"""


def measure(folder: Path, cache_dir: Path, root: Path) -> dict[str, float] | None:
    """{"copy": bytes per extra copy, "instance": bytes per extra instance, both having
    served a call, "registered": per extra instance not called yet}, or None
    where /proc/self/statm does not exist (not Linux)."""
    return run_rss_script(_SCRIPT, [str(folder), str(cache_dir), str(COPIES)], root)


_DISTINCT = """
import wasmtime
from wasmext.testing import guest_wat, make_host

n = int(sys.argv[1])
mods = [bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True}, hooks=("on_plain_text",),
                                          data=f"distinct plugin {i}".encode())))
        for i in range(2 * n + 2)]
engine = wasmtime.Engine()
linker = wasmtime.Linker(engine)
for imp in wasmtime.Module(engine, mods[0]).imports:  # the guest's imports, answering 0
    linker.define_func(imp.module, imp.name, imp.type, lambda *args: 0)
bare = []
def one_bare(wasm):
    store = wasmtime.Store(engine)
    module = wasmtime.Module(engine, wasm)
    instance = linker.instantiate(store, module)
    instance.exports(store)["wasmext_call"](store, 1024, 0)
    bare.append((store, module, instance))
host = make_host((mods[0], {"plugin_id": "p0"}))
session = host.session().__enter__()
session.on_plain_text("warm up")
one_bare(mods[1])
before = rss()
for i in range(1, n + 1):
    host.add(mods[i + 1], plugin_id=f"p{i}")
session.on_plain_text("every plugin serves once")
after_plugins = rss()
for i in range(n):
    one_bare(mods[n + 2 + i])
after_bare = rss()
print(json.dumps({"plugin": (after_plugins - before) / n,
                  "bare": (after_bare - after_plugins) / n}))
"""


DISTINCT: dict[str, float] = {}  # the run's figure, kept for run.py's report


def measure_distinct(root: Path, n: int = 100) -> dict[str, float] | None:
    """{"plugin": bytes per distinct plugin loaded and called once in a Host, "bare":
    bytes per wasmtime Module + Store + Instance of such a module}, in a fresh
    interpreter; None where /proc/self/statm does not exist."""
    figure = run_rss_script(_DISTINCT, [str(n)], root)
    if figure is not None:
        DISTINCT.update(figure)
    return figure
