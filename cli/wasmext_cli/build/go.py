"""Build a Go plugin with the Go SDK (guest-sdks/go): a WASI reactor.

Two steps. The first (`python -m wasmext_cli.build.go prepare ...`) fills a
work folder, one per plugin folder under ~/.cache/wasmext-go, with a copy of
the plugin's sources, a symlink `sdk` to the Go SDK and this go.mod:

    module wasmext.dev/plugin
    go 1.24
    require wasmext.dev/wasmext v0.0.0
    replace wasmext.dev/wasmext => ./sdk

so a plugin folder needs no go.mod of its own and the SDK is found wherever
the checkout is. The second runs

    GOOS=wasip1 GOARCH=wasm go build -C <work> -buildmode=c-shared -trimpath \
        -buildvcs=false -ldflags="-s -w -buildid=" -o <out> .

`-buildmode=c-shared` makes a reactor (it exports `_initialize`, which
starts the Go runtime and runs the init functions, and no `_start`). Builds
are reproducible: -trimpath names files by module path, the build info
records the replacement as `./sdk`, and nothing else of the machine ends up
in the module. The Go toolchain must be 1.24 or newer (//go:wasmexport);
GOTOOLCHAIN=local keeps `go` from fetching another one during a build.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from wasmext.buildstamp import interpreter
from wasmext.manifest import BuildSpec
from wasmext_cli.build import BuildError, ToolchainMissing, sdk_for, sdk_root

GO_MIN = (1, 24)
SDK_MODULE = "wasmext.dev/wasmext"
PLUGIN_MODULE = "wasmext.dev/plugin"
GO_MOD = f"""module {PLUGIN_MODULE}

go {GO_MIN[0]}.{GO_MIN[1]}

require {SDK_MODULE} v0.0.0

replace {SDK_MODULE} => ./sdk
"""
FLAGS = ("-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=")


def sdk_dir() -> Path:
    """The Go SDK folder."""
    return sdk_root() / "go"


def install_hint() -> str:
    """How to install Go."""
    return f"bash {sdk_dir() / 'setup-toolchain.sh'}   (as root on Debian; installs Go >= 1.24)"


def find_go() -> str | None:
    """The go executable on PATH or in /usr/local/go, or None."""
    found = shutil.which("go")
    if found:
        return found
    default = Path("/usr/local/go/bin/go")
    return str(default) if default.is_file() else None


@functools.lru_cache(maxsize=8)
def go_version(go: str) -> tuple[int, int] | None:
    """The (major, minor) of the `go` binary, or None when it cannot be run."""
    try:
        proc = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "GOTOOLCHAIN": "local"})
    except OSError:
        return None
    match = re.match(r"go(\d+)\.(\d+)", proc.stdout.strip())
    if proc.returncode != 0 or match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def toolchain() -> str:
    """The `go` binary; ToolchainMissing with the install command when absent or too old."""
    go = find_go()
    if go is None:
        raise ToolchainMissing(f"the Go toolchain is not installed; install it with: "
                               f"{install_hint()}")
    version = go_version(go)
    if version is None or version < GO_MIN:
        have = "an unknown version" if version is None else f"go{version[0]}.{version[1]}"
        raise ToolchainMissing(f"{go} is {have}, the Go SDK needs go{GO_MIN[0]}.{GO_MIN[1]} or "
                               f"newer; install it with: {install_hint()}")
    return go


def cache_home() -> Path:
    """The cache folder: XDG_CACHE_HOME, ~/.cache, or the temp folder."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg)
    home = os.environ.get("HOME")
    return Path(home) / ".cache" if home else Path(tempfile.gettempdir())


def work_dir(plugin_dir: Path) -> Path:
    """The plugin's build folder: the same one for every build of that folder."""
    key = hashlib.sha256(str(plugin_dir.resolve()).encode()).hexdigest()[:16]
    return cache_home() / "wasmext-go" / f"{plugin_dir.name}-{key}"


def go_env() -> list[str]:
    """Variables for `go build` (passed through `env`, as steps are plain argv lists)."""
    env = ["GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOTOOLCHAIN=local",
           "GOFLAGS=-mod=readonly", "GOWORK=off"]
    if not os.environ.get("HOME"):  # go needs somewhere for its caches
        base = Path(tempfile.gettempdir()) / "wasmext-go-home"
        if not os.environ.get("GOCACHE"):
            env.append(f"GOCACHE={base / 'cache'}")
        if not os.environ.get("GOPATH"):
            env.append(f"GOPATH={base / 'gopath'}")
    return env


def commands(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    """The steps building a Go plugin: prepare the work folder, then go build."""
    go = toolchain()
    work = work_dir(plugin_dir)
    prepare = [interpreter(), "-m", "wasmext_cli.build.go", "prepare", str(work),
               str(plugin_dir), str(sdk_for("go", plugin_dir)), *spec.sources]
    build = ["env", *go_env(), go, "build", "-C", str(work), *FLAGS, "-o", str(out.resolve()),
             "."]
    return [prepare, build]


def prepare(work: Path, plugin_dir: Path, sdk: Path, sources: list[str]) -> None:
    """Fill `work` afresh: go.mod, the `sdk` symlink and copies of the sources."""
    if not (sdk / "go.mod").is_file():
        raise BuildError(f"{sdk}: not the Go SDK (no go.mod)")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "go.mod").write_text(GO_MOD, encoding="utf-8")
    (work / "sdk").symlink_to(sdk.resolve(), target_is_directory=True)
    for source in sources:
        rel = Path(source)
        if rel.is_absolute() or ".." in rel.parts:
            raise BuildError(f"build.sources: {source!r} must be a path inside the plugin folder")
        dest = work / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plugin_dir / rel, dest)


def main(argv: list[str]) -> int:
    """Command line of the prepare step; the exit status."""
    if len(argv) < 4 or argv[0] != "prepare":
        print("usage: python -m wasmext_cli.build.go prepare WORK PLUGIN_DIR SDK_DIR SOURCE...",
              file=sys.stderr)
        return 2
    try:
        prepare(Path(argv[1]), Path(argv[2]), Path(argv[3]), argv[4:])
    except (OSError, BuildError) as exc:
        print(f"preparing the Go build failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
