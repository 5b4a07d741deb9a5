"""The package's layers import downwards only, and no import circle exists.

Layers (docs/architecture.md): 0 leaves (errors, ABI constants, TOML, MCP config
parsing) <- 1 the sandbox and the building blocks (state, observe, manifest) <- 2
services (and the MCP client, which feeds the tool registry) <- 3 hooks <- 4 the
host (Host, Session, config, discovery, runtime, agent, aio, testing) <- 5 bridges
(the MCP server). Every import counts, also those inside functions and under
TYPE_CHECKING: a type-only upward import is still a dependency on a higher layer.
Circles are looked for among every import too, inside packages as between them:
a type-only or function-level import back is still a circle, broken by moving the
shared piece (a protocol, a data type) down.

A module is one concept, as long as that concept needs: there is no line cap, only
a warning over SOFT_LINES that asks whether a second concept has moved in.
Every module is listed in docs/architecture.md.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from pathlib import Path

import wasmext

PACKAGE = Path(wasmext.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
SOFT_LINES = 600

LAYERS: dict[str, int] = {
    "wasmext._abi": 0, "wasmext._toml": 0, "wasmext._version": 0, "wasmext.errors": 0,
    "wasmext.files": 0, "wasmext.forks": 0, "wasmext.ids": 0, "wasmext.loops": 0,
    "wasmext.text": 0,
    "wasmext.validation": 0,
    "wasmext.buildstamp": 0,
    "wasmext.mcp": 0,  # the package's leaves: config, envsubst, content
    "wasmext.mcp.oauth.config": 0, "wasmext.mcp.oauth.store": 0,
    "wasmext.sandbox": 1, "wasmext.state": 1, "wasmext.observe": 1, "wasmext.manifest": 1,
    "wasmext.capabilities": 1,
    "wasmext.services": 2, "wasmext.mcp.client": 2, "wasmext.mcp.oauth": 2,
    "wasmext.mcp.oauth.login": 4,  # an operator command over the config and the transport
    "wasmext.hooks": 3,
    "wasmext.lifecycle.signing": 0,
    "wasmext.lifecycle.approvals": 1, "wasmext.lifecycle.bundle": 1,
    "wasmext.lifecycle": 4,
    "wasmext.cluster": 4,
    "wasmext.mcp.server": 5,
}
TOP = 4  # every other module: the host layer


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> int:
    best, depth = TOP, -1
    for prefix, number in LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
            best, depth = number, prefix.count(".")
    return best if module != "wasmext" else TOP


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("wasmext"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            if not base.startswith("wasmext"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != module}


@functools.cache
def graph() -> dict[str, set[str]]:
    """Each module's wasmext imports: parsed when a test first asks, not at collection
    (every pytest-xdist worker collects this file; one runs these tests)."""
    return {m: imports_of(m) for m in MODULES}


def test_every_module_is_walked() -> None:
    assert "wasmext.sandbox.instance" in MODULES
    assert "wasmext.host" in MODULES
    assert graph()["wasmext.host"], "the walker finds no imports at all"


def test_no_upward_import() -> None:
    upward = sorted(f"{m} (layer {layer(m)}) imports {d} (layer {layer(d)})"
                    for m, deps in graph().items() if m != "wasmext"
                    for d in deps if layer(d) > layer(m))
    assert upward == []


def test_no_import_circle() -> None:
    # Tarjan's strongly connected components: any component of two or more is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph()[v]:
            if w == "wasmext" or v == "wasmext":
                continue  # the root package re-exports everything; nothing imports it
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph()):
        if module not in index:
            visit(module)
    assert circles == []


def test_nothing_below_the_top_imports_the_root_package() -> None:
    assert sorted(m for m, deps in graph().items() if "wasmext" in deps) == []


def test_a_long_module_is_flagged_not_failed() -> None:
    long = {m: n for m, p in MODULES.items()
            if (n := len(p.read_text().splitlines())) > SOFT_LINES and not m.endswith("_abi")}
    for module, lines in sorted(long.items()):
        warnings.warn(f"{module} has {lines} lines: is it still one concept?", stacklevel=1)


def test_every_module_is_in_the_architecture_doc() -> None:
    listed = set(re.findall(r"`([a-z_][a-z0-9_.]*)`", ARCHITECTURE.read_text()))
    missing = sorted(m for m in MODULES if m != "wasmext"
                     and m.removeprefix("wasmext.") not in listed and m not in listed)
    assert missing == [], "add these to docs/architecture.md"


def test_the_circle_check_sees_function_level_imports() -> None:
    server_imports = graph()["wasmext.plugin_servers"]
    assert "wasmext.mcp.client.connections" in server_imports  # imported inside start_mcp
