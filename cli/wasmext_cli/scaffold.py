"""`wasmext new NAME --lang L`: a plugin project that builds and passes its test.

The project is the SDK's hello example (the one the cross-SDK suite runs in
CI, so the template cannot rot) with its id changed, plus a pytest file and a
README. Building is `wasmext build .`; plugin.toml's [build] table is the
build file.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from wasmext.files import atomic_write, fsync_dir
from wasmext.manifest import ID_RE
from wasmext_cli.build import LANGUAGES, sdk_root

__all__ = ["ScaffoldError", "new_plugin"]

SKIP = {".wasm", ".tmp"}
SKIP_DIRS = {"node_modules", "zig-cache", ".zig-cache", "target", "__pycache__"}

TEST = '''"""The scaffolded plugin builds and answers its hook (run: pytest)."""

from pathlib import Path

from wasmext import Runtime
from wasmext_cli.build import build_plugin

HERE = Path(__file__).resolve().parent


def test_greet() -> None:
    build_plugin(HERE)
    with Runtime(cache=False) as rt:
        plugin = rt.load(HERE)
        assert plugin.call("greet", "Ada").value == "Hello, Ada!"
        assert plugin.call("greet", "Ada").changed
'''

README = '''# {id}

A wasmext plugin in {lang}, scaffolded by `wasmext new`.

    wasmext build .                          # compile to {id}.wasm
    wasmext call . greet --data '"Ada"'      # "Hello, Ada!"
    python -m pytest                          # build and test

Hook `greet` takes a name and answers "<greeting>, <name>!"; the `greeting`
setting (default "Hello") changes the first word. See the SDK's README for
the API: guest-sdks/{lang}/README.md in the wasmext repository.
'''


class ScaffoldError(Exception):
    """The project cannot be created; the message says why."""


def new_plugin(name: str, lang: str, parent: Path) -> Path:
    if not ID_RE.match(name):
        raise ScaffoldError(f"{name!r} is not a plugin id: lowercase letters, digits and "
                            "hyphens, 1-64 characters")
    if lang not in LANGUAGES:
        raise ScaffoldError(f"--lang must be one of {', '.join(LANGUAGES)}")
    template = sdk_root() / lang / "examples" / "hello"
    if not (template / "plugin.toml").is_file():
        raise ScaffoldError(f"no {lang} template at {template}")
    target = parent / name
    if target.exists():
        raise ScaffoldError(f"{target} already exists")
    # Made in a hidden folder beside the target and renamed into place: a killed
    # `wasmext new` leaves no half project that a second run would refuse.
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent))
    try:
        project = work / name
        shutil.copytree(template, project, ignore=lambda d, names: [
            n for n in names if Path(n).suffix in SKIP or n in SKIP_DIRS])
        manifest = project / "plugin.toml"
        text = manifest.read_text(encoding="utf-8")
        text = re.sub(r'(?m)^id\s*=\s*"[^"]*"', f'id = "{name}"', text, count=1)
        text = re.sub(r'(?m)^wasm\s*=\s*"[^"]*"\n', "", text)
        text = re.sub(r'(?m)^description\s*=\s*"[^"]*"',
                      f'description = "{name}: a wasmext plugin in {lang}."', text, count=1)
        atomic_write(manifest, text)
        atomic_write(project / f"test_{name.replace('-', '_')}.py", TEST)
        atomic_write(project / "README.md", README.format(id=name, lang=lang))
        _sync_tree(project)
        if target.exists():
            raise ScaffoldError(f"{target} already exists")
        os.rename(project, target)
        fsync_dir(parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


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
