"""The package's layers import downwards only, and no import circle exists.

Layers (docs/architecture.md): 0 leaves (errors, ABI constants, TOML, MCP config
parsing) <- 1 the sandbox and the building blocks (state, observe, manifest) <- 2
services (and the MCP client, which feeds the tool registry) <- 3 hooks <- 4 the
host (Host, Session, config, discovery, runtime, agent, aio, testing) <- 5 bridges
(the MCP server). Every import counts, also those inside functions and under
TYPE_CHECKING: a type-only upward import is still a dependency on a higher layer.
Circles are looked for among the imports that run (a type-only import back into
the same package, as between `state.base` and `state.engine`, runs never).
"""

from __future__ import annotations

import ast
from pathlib import Path

import wasmext

PACKAGE = Path(wasmext.__file__).parent

LAYERS: dict[str, int] = {
    "wasmext._abi": 0, "wasmext._toml": 0, "wasmext._version": 0, "wasmext.errors": 0,
    "wasmext.files": 0, "wasmext.text": 0,
    "wasmext.mcp": 0, "wasmext.mcp.envsubst": 0, "wasmext.mcp.config": 0,
    "wasmext.mcp.oauth_config": 0, "wasmext.mcp.oauth_store": 0,
    "wasmext.sandbox": 1, "wasmext.state": 1, "wasmext.observe": 1, "wasmext.manifest": 1,
    "wasmext.services": 2, "wasmext.mcp.client": 2, "wasmext.mcp.client_tools": 2,
    "wasmext.mcp.results": 2, "wasmext.mcp.served": 2, "wasmext.mcp.plugin_ops": 2,
    "wasmext.mcp.client_catalog": 2, "wasmext.mcp.client_caps": 2,
    "wasmext.mcp.client_lists": 2,
    "wasmext.mcp.oauth": 2, "wasmext.mcp.transport_http": 2,
    "wasmext.mcp.oauth_login": 4,  # an operator command over the config and the transport
    "wasmext.hooks": 3,
    "wasmext.lifecycle.signing": 0,
    "wasmext.lifecycle.approvals": 1, "wasmext.lifecycle.bundle": 1,
    "wasmext.lifecycle": 4, "wasmext.lifecycle.reload": 4, "wasmext.lifecycle.watch": 4,
    "wasmext.lifecycle.uninstall": 4,
    "wasmext.cluster": 4,
    "wasmext.mcp.server": 5, "wasmext.mcp.served_handlers": 5,
    "wasmext.mcp.served_changes": 5, "wasmext.mcp.served_upstream": 5,
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


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of import nodes under `if TYPE_CHECKING:`."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return ids


def imports_of(module: str, runtime_only: bool = False) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    skip = _type_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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


GRAPH = {m: imports_of(m) for m in MODULES}
RUNTIME_GRAPH = {m: imports_of(m, runtime_only=True) for m in MODULES}


def test_every_module_is_walked() -> None:
    assert "wasmext.sandbox.instance" in MODULES
    assert "wasmext.host" in MODULES
    assert GRAPH["wasmext.host"], "the walker finds no imports at all"


def test_no_upward_import() -> None:
    upward = sorted(f"{m} (layer {layer(m)}) imports {d} (layer {layer(d)})"
                    for m, deps in GRAPH.items() if m != "wasmext"
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
        for w in RUNTIME_GRAPH[v]:
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

    for module in sorted(RUNTIME_GRAPH):
        if module not in index:
            visit(module)
    assert circles == []


def test_nothing_below_the_top_imports_the_root_package() -> None:
    assert sorted(m for m, deps in GRAPH.items() if "wasmext" in deps) == []


def test_modules_stay_small() -> None:
    big = {m: n for m, p in MODULES.items()
           if (n := len(p.read_text().splitlines())) > 420 and not m.endswith("_abi")}
    assert big == {}
