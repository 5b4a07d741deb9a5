"""Every public class, function and method of the host and the CLI has a docstring.

Public means a name without a leading underscore, at module level or in a public
class (members of a private class, and functions nested in functions, are not
public). Exempt: dunder methods, @overload stubs, and a method that overrides one
with a docstring in a base class of these packages (found by the base's name,
up the chain): the base's line already says what it does, as help() shows.
The packages are read as source, so the check needs nothing imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "host" / "wasmext", ROOT / "cli" / "wasmext_cli"]

Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def modules() -> Iterator[tuple[Path, ast.Module]]:
    """Every source file of the host and the CLI, parsed."""
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            yield path, ast.parse(path.read_text(), str(path))


def is_overload(node: Def) -> bool:
    """Whether the definition is decorated with @overload (typing or typing_extensions)."""
    return any((isinstance(d, ast.Name) and d.id == "overload")
               or (isinstance(d, ast.Attribute) and d.attr == "overload")
               for d in node.decorator_list)


def base_names(node: ast.ClassDef) -> list[str]:
    """The names of a class's bases, without module or type parameters."""
    names = []
    for base in node.bases:
        if isinstance(base, ast.Subscript):  # Generic[T], Protocol[T]
            base = base.value
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def public_members(node: ast.ClassDef | ast.Module) -> Iterator[Def]:
    """The public classes and functions defined directly in a module or class body."""
    for child in node.body:
        if (isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and not child.name.startswith("_") and not is_overload(child)):
            yield child


def documented_methods(tree: dict[str, list[ast.ClassDef]]) -> dict[str, set[str]]:
    """Map each class name to the methods it or a base of it (by name) documents."""
    result: dict[str, set[str]] = {}

    def resolve(name: str, seen: frozenset[str]) -> set[str]:
        if name in result:
            return result[name]
        found: set[str] = set()
        for cls in tree.get(name, []):
            found |= {m.name for m in cls.body
                      if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and ast.get_docstring(m) is not None}
            for base in base_names(cls):
                if base not in seen:
                    found |= resolve(base, seen | {base})
        result[name] = found
        return found

    for name in tree:
        resolve(name, frozenset({name}))
    return result


def undocumented() -> list[str]:
    """Each public definition without a docstring, as "path:line qualified.name"."""
    parsed = list(modules())
    classes: dict[str, list[ast.ClassDef]] = {}
    for _, module in parsed:
        for node in ast.walk(module):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(node)
    inherited = documented_methods(classes)

    missing: list[str] = []

    def check(path: Path, owner: ast.ClassDef | ast.Module, prefix: str) -> None:
        from_bases: set[str] = set()
        if isinstance(owner, ast.ClassDef):
            for base in base_names(owner):
                from_bases |= inherited.get(base, set())
        for node in public_members(owner):
            if ast.get_docstring(node) is None and node.name not in from_bases:
                where = path.relative_to(ROOT)
                missing.append(f"{where}:{node.lineno} {prefix}{node.name}")
            if isinstance(node, ast.ClassDef):
                check(path, node, f"{prefix}{node.name}.")

    for path, module in parsed:
        check(path, module, "")
    return missing


def test_the_walk_finds_the_packages() -> None:
    names = {path.name for path, _ in modules()}
    assert {"host.py", "session.py", "main.py"} <= names


def test_every_public_definition_has_a_docstring() -> None:
    missing = undocumented()
    assert missing == [], f"{len(missing)} without a docstring:\n" + "\n".join(missing)


def test_an_override_inherits_only_a_documented_base() -> None:
    source = '''
class Base:
    def run(self):
        """Run it."""
    def stop(self):
        pass
class Child(Base):
    def run(self):
        pass
    def stop(self):
        pass
'''
    tree = ast.parse(source)
    classes = {n.name: [n] for n in tree.body if isinstance(n, ast.ClassDef)}
    inherited = documented_methods(classes)
    assert inherited["Child"] == {"run"}
    assert inherited["Base"] == {"run"}
