"""`wasmext build [PLUGIN...]`: compile plugin folders (default: the current one)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wasmext_cli.common import EXIT_FAULT, _line, must_exist

if TYPE_CHECKING:  # the builder pulls in rich and the manifest; `--help` needs neither
    from wasmext_cli.build import BuildResult, Progress


@contextlib.contextmanager
def _progress(quiet: bool) -> Iterator[Progress]:
    """A spinner with the latest step on a terminal; plain lines on stderr otherwise."""
    if quiet:
        yield lambda _line: None
        return
    from wasmext_cli.ui import stderr_console

    console = stderr_console()
    if console.is_terminal:
        with console.status("building") as status:
            yield lambda line: status.update(f"building {line}")
        return
    lock = threading.Lock()

    def plain(line: str) -> None:
        with lock:
            click.echo(f"building {line}", err=True)

    yield plain


@click.command()
@click.argument("plugins", nargs=-1,
                type=click.Path(file_okay=False, path_type=Path))
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Build this many plugins at once.")
@click.option("-v", "--verbose", is_flag=True,
              help="Print each command and the compilers' whole output.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the paths of the built modules.")
@click.option("-f", "--force", is_flag=True,
              help="Build even when nothing the build reads has changed.")
@click.option("--compile/--no-compile", "precompile", default=True, show_default=True,
              help="Also compile each module into the host's compile cache, so the first "
                   "load after the build does not compile.")
def build(plugins: tuple[Path, ...], jobs: int, verbose: bool, quiet: bool,
          force: bool, precompile: bool) -> None:
    """Build each plugin folder (default: the current folder) into its .wasm.

    A folder's plugin.toml [build] table names the language and sources. A module
    built from exactly the sources, SDK and toolchain there now is kept (say
    --force to build anyway). A failed build prints one line: the plugin, the
    sources or plugin.toml field, and the compiler's first error (--verbose
    prints everything). The compiled code goes into the compile cache the host
    reads (unless --no-compile): a componentized interpreter then compiles here,
    once, rather than at its first load.
    """
    from concurrent.futures import ThreadPoolExecutor

    from wasmext import Runtime, WasmextError
    from wasmext_cli.build import BuildError, build_plugin

    folders = plugins or (Path("."),)
    for folder in folders:
        must_exist(folder, "plugin folder")
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            click.echo(text, err=True)

    failures: list[str] = []
    runtime = Runtime() if precompile else None
    with _progress(quiet) as progress:
        def one(folder: Path) -> BuildResult | None:
            if folder.is_dir() and not (folder / "plugin.toml").exists():
                where = "this folder" if folder == Path(".") else _line(str(folder))
                failures.append(f"{where} has no plugin.toml, so it is no plugin project: "
                                "`wasmext new NAME --lang LANG` makes one, or give "
                                "`wasmext build` a plugin folder")
                return None
            try:
                return build_plugin(folder, progress=progress, verbose=say if verbose else None,
                                    force=force, runtime=runtime)
            except BuildError as exc:
                failures.append(str(exc))
            except WasmextError as exc:
                failures.append(exc.describe().removeprefix("wasmext: "))
            return None

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(one, folders))
    if runtime is not None:
        runtime.close()
    for result in results:
        if result is None:
            continue
        if result.warning:
            click.echo(f"wasmext: warning: {result.warning}", err=True)
        if quiet:
            click.echo(str(result.wasm))
        else:
            done = "up to date" if result.up_to_date else "built"
            kept = ", as built before from these inputs" if result.kept else ""
            click.echo(f"{done} {result.wasm} ({result.wasm.stat().st_size} bytes{kept})")
    for line in failures:
        click.echo(f"wasmext: {line}", err=True)
    if failures:
        sys.exit(EXIT_FAULT)
