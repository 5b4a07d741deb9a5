"""`wasmext new NAME --lang L`: a plugin project that builds and passes its test.

The project is the SDK's hello example (the one the cross-SDK suite runs in
CI, so the template cannot rot) with its id and registration name changed, a
vendored copy of the SDK (./wasmext-sdk, which `wasmext build` compiles against), the language's
own project files (scaffold_native.py), a .gitignore, a pytest file that uses
only the public API, and a README. Building is `wasmext build`; plugin.toml's
[build] table is the build file. The languages are the table in languages.py.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from wasmext.files import atomic_write, fsync_dir
from wasmext.manifest import ID_RE, load_folder
from wasmext_cli.build import VENDORED_SDK, resolve, sdk_root
from wasmext_cli.languages import LANGUAGES, SCAFFOLD_LANGUAGES

__all__ = ["ScaffoldError", "new_plugin"]

SKIP = {".wasm", ".tmp"}
SKIP_DIRS = {"node_modules", "zig-cache", ".zig-cache", "target", "__pycache__"}

TEST = '''"""{id} builds and answers its hook. Run `python -m pytest` in this folder
(with `pip install 'wasmext[test]'`); it uses only wasmext's public API."""

from pathlib import Path

from wasmext import Runtime
from wasmext.testing import build_plugin

HERE = Path(__file__).resolve().parent


def test_greet() -> None:
    build_plugin(HERE)  # also compiles it into the cache this Runtime reads
    with Runtime() as rt:
        plugin = rt.load(HERE)
        answer = plugin.call("greet", "Ada")
        assert answer.value == "Hello, Ada!"
        assert answer.changed
'''

PYTEST_INI = """[pytest]
norecursedirs = wasmext-sdk node_modules target .zig-cache zig-out .git
# anyio (installed with wasmext) loads its pytest plugin into every run, a tenth of a
# second of each test run here; delete this line when your tests use @pytest.mark.anyio.
addopts = -p no:anyio
"""

README = '''# {id}

A wasmext plugin in {lang}, scaffolded by `wasmext new`.

    pip install 'wasmext[build,test]'          # the CLI, the zig toolchain, pytest
    wasmext build                              # compile to {id}.wasm
    wasmext inspect .                          # what it registered
    wasmext call . greet --data '"Ada"'        # "Hello, Ada!"
    python -m pytest                           # build and test

Hook `greet` takes a name and answers "<greeting>, <name>!"; the `greeting`
setting (default "Hello") changes the first word.

`plugin.toml` names the plugin and its [build]; `wasmext-sdk/` is the {lang}
guest SDK this project builds against (a vendored copy: update it by
replacing the folder). Its README describes the API.{native}
'''

NATIVE = {
    # The build extra brings zig and componentize-py only: a language whose compiler
    # comes from elsewhere says which and how, or the first `wasmext build` is a surprise.
    "rust": "\n\n`Cargo.toml` makes this a cargo project: `cargo check` and rust-analyzer "
            "work here.\n\nBuilding needs rustc with the wasm32-unknown-unknown standard "
            "library (not from pip): `rustup target add wasm32-unknown-unknown`.",
    "go": "\n\n`go.mod` requires the SDK module (replaced by ./wasmext-sdk): `go vet ./...` "
          "works.\n\nBuilding needs Go 1.24 or newer on PATH (not from pip).",
    "assemblyscript": "\n\n`package.json` lists the SDK and the compiler: `npm install` "
                      "fetches them (`wasmext build` runs it when node_modules is missing; "
                      "node 18+ and npm are not from pip).",
    "zig": "\n\n`build.zig` builds the same module with `zig build` (zig-out/bin/).",
    "c": "\n\n`compile_flags.txt` points clangd at the SDK header.",
    "python": "\n\nBuilding needs componentize-py: `pip install 'wasmext[build]'`.",
    "javascript": "\n\n`package.json` pins componentize-js: `npm install` fetches it "
                  "(`wasmext build` runs it when node_modules is missing; node and npm come "
                  "from `apt-get install nodejs npm`).",
}
# `wasmext new --package`: a wheel carrying the built module and plugin.toml as package
# data, declared under the entry point the host looks at ([plugins] entry_points = true).
PYPROJECT = '''[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "wasmext-plugin-{id}"
version = "0.1.0"
description = "{id}: a wasmext plugin in {lang}, shipped as a Python package."
requires-python = ">=3.10"

# The host finds the plugin folder through this entry point when its config says
# [plugins] entry_points = true. It never imports the package: the value names the
# folder (inside the wheel) that holds plugin.toml and the module.
[project.entry-points."wasmext.plugins"]
{id} = "{package}"

# Only the plugin goes into the wheel: run `wasmext build` first.
[tool.hatch.build.targets.wheel]
bypass-selection = true

[tool.hatch.build.targets.wheel.force-include]
"plugin.toml" = "{package}/plugin.toml"
"{id}.wasm" = "{package}/{id}.wasm"
'''

PACKAGE_README = '''

## Shipping it as a Python package

`pyproject.toml` packs the built module and plugin.toml into a wheel:

    wasmext build && pip wheel --no-deps -w dist .
    pip install dist/wasmext_plugin_{under}-0.1.0-py3-none-any.whl

A host finds it when its wasmext.toml says `[plugins] entry_points = true`; it
still runs with no grants until the operator approves it (`wasmext grant`).
'''

# The SDK parts a project does not need in its vendored copy.
VENDOR_SKIP = {"examples", "conformance", "tests", "setup-toolchain.sh", "package-lock.json"}


_MD_LINK = re.compile(r"\[([^\]\n]*)\]\(([^)\s]+)\)")


def _guides_by_command(vendored: Path, sdk: Path) -> None:
    """The vendored SDK's guides link to wasmext's own (`../../abi/SPEC.md`), which a
    project does not have: each such link becomes its text and the command that prints
    the guide from the installed wheel (`wasmext docs spec`); links inside the SDK stay,
    but for one to what the copy leaves out (its examples), which becomes its text."""
    from wasmext_cli.docs_cmd import docs_root, topics

    by_path = {page.resolve(): topic for topic, page in topics(docs_root()).items()}
    inside = sdk.resolve()
    for page in sorted(vendored.rglob("*.md")):
        source_dir = (sdk / page.relative_to(vendored)).parent

        def unlinked(link: re.Match[str], source_dir: Path = source_dir) -> str:
            text, target = link.group(1), link.group(2)
            if "://" in target or target.startswith(("#", "mailto:")):
                return link.group(0)
            resolved = (source_dir / target.split("#", 1)[0]).resolve()
            if resolved.is_relative_to(inside):  # kept, unless the copy left it out
                return link.group(0) if (vendored / resolved.relative_to(inside)).exists() \
                    else text
            topic = by_path.get(resolved)
            return f"{text} (`wasmext docs {topic}`)" if topic else text

        original = page.read_text(encoding="utf-8")
        rewritten = _MD_LINK.sub(unlinked, original)
        if rewritten != original:
            atomic_write(page, rewritten)


class ScaffoldError(Exception):
    """The project cannot be created; the message says why."""


def package_name(plugin_id: str) -> str:
    """The Python package a `--package` project's wheel installs the plugin folder as."""
    return "wasmext_plugin_" + plugin_id.replace("-", "_")


def new_plugin(name: str, lang: str, parent: Path, *, package: bool = False) -> Path:
    """Create the project NAME in LANG under `parent`; `package`: with a pyproject.toml
    that ships it as a wheel declaring the `wasmext.plugins` entry point."""
    if not ID_RE.match(name):
        raise ScaffoldError(f"{name!r} is not a plugin id: lowercase letters, digits and "
                            "hyphens, 1-64 characters")
    if lang not in SCAFFOLD_LANGUAGES:
        raise ScaffoldError(f"--lang must be one of {', '.join(SCAFFOLD_LANGUAGES)}")
    entry = LANGUAGES[lang]
    sdk = sdk_root() / str(entry.sdk)
    template = sdk / entry.template
    if not (template / "plugin.toml").is_file():
        raise ScaffoldError(f"no {lang} template at {template}")
    if not parent.is_dir():
        raise ScaffoldError(f"--dir {parent}: no such folder (create it first)")
    target = parent / name
    if target.exists():
        raise ScaffoldError(f"{target} already exists")
    # Made in a hidden folder beside the target and renamed into place: a killed
    # `wasmext new` leaves no half project that a second run would refuse.
    work = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent))
    try:
        project = work / name
        shutil.copytree(template, project, ignore=lambda d, names: [
            n for n in names if Path(n).suffix in SKIP or n in SKIP_DIRS])
        _rename_registration(template, project, name)
        manifest = project / "plugin.toml"
        text = manifest.read_text(encoding="utf-8")
        text = re.sub(r'(?m)^id\s*=\s*"[^"]*"', f'id = "{name}"', text, count=1)
        text = re.sub(r'(?m)^wasm\s*=\s*"[^"]*"\n', "", text)
        text = re.sub(r'(?m)^description\s*=\s*"[^"]*"',
                      f'description = "{name}: a wasmext plugin in {lang}."', text, count=1)
        atomic_write(manifest, text)
        shutil.copytree(sdk, project / VENDORED_SDK, ignore=lambda d, names: [
            n for n in names if Path(n).suffix in SKIP or n in SKIP_DIRS
            or (Path(d) == sdk and n in VENDOR_SKIP)])
        _guides_by_command(project / VENDORED_SDK, sdk)
        files = {f"test_{name.replace('-', '_')}.py": TEST.format(id=name),
                 "pytest.ini": PYTEST_INI,
                 "README.md": README.format(id=name, lang=lang, native=NATIVE.get(lang, ""))}
        if entry.project is not None:
            files.update(resolve(entry.project)(name, project))
        if package:
            if "pyproject.toml" in files or (project / "pyproject.toml").exists():
                raise ScaffoldError(f"--package: the {lang} template has its own "
                                    "pyproject.toml")
            files["pyproject.toml"] = PYPROJECT.format(id=name, lang=lang,
                                                       package=package_name(name))
            files["README.md"] += PACKAGE_README.format(under=name.replace("-", "_"))
        for rel, content in files.items():
            atomic_write(project / rel, content)
        _sync_tree(project)
        if target.exists():
            raise ScaffoldError(f"{target} already exists")
        os.rename(project, target)
        fsync_dir(parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _rename_registration(template: Path, project: Path, name: str) -> None:
    """Give the plugin's registration the project's name: the template's sources register
    under the example's id (the quoted string `"hello"`), which `wasmext inspect` and every
    trace would otherwise show for each scaffolded project."""
    spec = load_folder(template)
    old = f'"{spec.id}"'
    renamed = 0
    for rel in spec.build.sources if spec.build is not None else []:
        source = project / rel
        text = source.read_text(encoding="utf-8")
        renamed += text.count(old)
        atomic_write(source, text.replace(old, f'"{name}"'))
    if renamed != 1:  # the template changed shape: fail here, not in an author's trace
        raise ScaffoldError(f"the {template.name} template names its registration "
                            f"{old} {renamed} times, not once")


def _sync_tree(root: Path) -> None:
    """Flush every file and folder of a fresh tree to disk before it is renamed in."""
    for folder, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(folder, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(folder)
