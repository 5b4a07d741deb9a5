"""A user copy of a plugin folder: reference 003's "duplicate extension".

`copy_to_user(host, "json")` finds the plugin serving the output extension
`#json` (or the plugin with that id), copies its folder into the config's
`[plugins] user_dir` as `<id>-copy` (then `-copy-2`, ...) with the id in its
plugin.toml rewritten, ready to edit and rebuild. The names it serves are
compiled into its module, so until it is changed the copy serves the same
`#names` (its module, copied and renamed, loads as it is); loaded from the
user folder it is ordered before the original, as a user extension overrides
a built-in in 003. The copy starts with no grants:
approvals name a plugin id and its module's digest, and neither carries over.

The operator's switch `[plugins] user_extensions = false` refuses copies (and
does not load the user folder at all). Only regular files are copied (a
symlink anywhere refuses the copy, as plugin folders refuse them), at most
`MAX_FILES` files and `MAX_BYTES` bytes; dot-files and dot-folders stay behind.
The copy is assembled under a dot name, which discovery ignores, and renamed
into place in one step.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from wasmext.errors import ActivationError, WasmextError
from wasmext.files import atomic_write, fsync_dir, read_regular
from wasmext.lifecycle.uninstall import find_folder
from wasmext.manifest import ID_RE, load_folder

if TYPE_CHECKING:
    from wasmext.host import Host

__all__ = ["MAX_BYTES", "MAX_FILES", "copy_to_user"]

MAX_FILES = 2000
MAX_BYTES = 64 << 20
_ID_LINE = re.compile(r'^(id\s*=\s*)"[^"\n]*"', re.MULTILINE)


def _plugin_of(host: Host, ident: str) -> str:
    if ident in host.plugins:
        return ident
    for entry in host.ordered("output_extension"):
        if entry.pattern == ident:
            return entry.plugin_id
    raise ActivationError(f"no loaded plugin is, or serves the output extension, {ident!r}")


def _new_id(host: Host, user_dir: Path, base: str, wanted: str | None) -> str:
    if wanted is not None:
        if not ID_RE.match(wanted):
            raise ActivationError(f"{wanted!r} is not a plugin id (lowercase letters, digits "
                                  "and hyphens, 1-64)")
        if wanted in host.plugins or (user_dir / wanted).exists():
            raise ActivationError(f"a plugin {wanted!r} already exists")
        return wanted
    n = 1
    while True:
        suffix = "-copy" if n == 1 else f"-copy-{n}"
        candidate = base[:64 - len(suffix)].rstrip("-") + suffix
        if candidate not in host.plugins and not (user_dir / candidate).exists():
            return candidate
        n += 1


def _copy_tree(source: Path, target: Path) -> None:
    files, size = 0, 0
    for root, dirs, names in os.walk(source):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        here = Path(root)
        (target / here.relative_to(source)).mkdir(exist_ok=True)
        for name in sorted(n for n in names if not n.startswith(".")):
            path = here / name
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                raise ActivationError(f"{path.relative_to(source)} is not a regular file: "
                                      "the folder is not copied")
            files, size = files + 1, size + os.lstat(path).st_size
            if files > MAX_FILES or size > MAX_BYTES:
                raise ActivationError(f"the folder is over {MAX_FILES} files or {MAX_BYTES} "
                                      "bytes: not copied")
            shutil.copyfile(path, target / path.relative_to(source), follow_symlinks=False)
        for d in dirs:
            if os.path.islink(here / d):
                raise ActivationError(f"{(here / d).relative_to(source)} is a symlink: the "
                                      "folder is not copied")


def copy_to_user(host: Host, ident: str, new_id: str | None = None) -> tuple[str, Path]:
    """Copy the plugin that is, or serves `#ident`, into the user folder: (new id, folder)."""
    if not host.config.user_extensions:
        raise ActivationError("user extensions are switched off by the operator "
                              "([plugins] user_extensions = false)")
    user_dir = host.config.user_dir
    if user_dir is None:
        raise ActivationError("the config names no [plugins] user_dir to copy into")
    plugin_id = _plugin_of(host, ident)
    source = find_folder(host.plugin_dirs, plugin_id)
    if source is None:
        raise ActivationError(f"plugin {plugin_id} was not loaded from a folder")
    user_dir.mkdir(parents=True, exist_ok=True)
    copy_id = _new_id(host, user_dir, plugin_id, new_id)
    staging = user_dir / f".wxb-copy-{copy_id}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        _copy_tree(source, staging)
        toml = read_regular(staging / "plugin.toml", 1 << 20).decode("utf-8")
        rewritten, count = _ID_LINE.subn(lambda m: f'{m.group(1)}"{copy_id}"', toml, count=1)
        if count != 1:
            raise ActivationError(f"{source.name}/plugin.toml has no id line to rewrite")
        atomic_write(staging / "plugin.toml", rewritten)
        try:
            manifest = load_folder(staging)
            if manifest.id != copy_id:
                raise ActivationError("the copy's plugin.toml does not name the new id")
            built = staging / f"{plugin_id}.wasm"
            if manifest.wasm is None and built.is_file():  # the module is named by the id
                os.rename(built, manifest.wasm_path)
        except WasmextError as err:
            if isinstance(err, ActivationError):
                raise
            raise ActivationError(f"the copy is not a plugin folder: {err.describe()}") from None
        os.rename(staging, user_dir / copy_id)
        fsync_dir(user_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return copy_id, user_dir / copy_id
