"""The plugin author's loop per language, from a wheel installed in a fresh venv.

    python benchmarks/author_loop.py [--lang c --lang rust ...] [--write-docs]
    python benchmarks/author_loop.py --venv DIR     # reuse a venv that has the wheel
    python benchmarks/author_loop.py --table        # print the last figures again

Builds the wheel from this checkout and installs it (with the `build` and
`test` extras) into a venv in a temporary folder outside the repository (or
uses `--venv`). Then, one language after the other, in an empty folder:
`wasmext new`, `wasmext build`, the scaffold's own pytest, an edit of the
source (a comment with a fresh token, so no cache has seen it), `wasmext
build`, the pytest, and the pytest again with nothing changed. Each step's
wall time and CPU time (user + system of every process it started) go into
benchmarks/results/author-loop.json; the table goes to stdout and, with
`--write-docs`, into docs/sdk-figures.md.

The machine is shared: wall time is what an author waits, CPU time what the
step costs whatever else runs. The wasmext caches (built outputs, compiled
code) start empty in a temporary XDG_CACHE_HOME, as for a new author; the
toolchains' own caches (zig's, the Rust SDK rlib's) are the user's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_cases import replace_doc_section  # noqa: E402

FIGURES = HERE / "results" / "author-loop.json"
DOCS = ROOT / "docs" / "sdk-figures.md"
LANGS = ("c", "zig", "rust", "go", "assemblyscript", "python", "javascript")
COLUMNS = ("first build", "first test", "rebuild after an edit", "test after the rebuild",
           "test re-run, no change")
# The author's loop: an edit, then `wasmext build` and the tests.
LOOP = ("rebuild after an edit", "test after the rebuild")
COMMENT = {"python": "#"}
# Debian's rustc has the wasm32 standard library; rustup's here has not.
RUSTC_DEBIAN = "/usr/bin/rustc"


@dataclass(frozen=True)
class Timed:
    """One step: its wall and CPU seconds and how it ended."""

    wall: float
    cpu: float
    returncode: int
    output: str


def timed(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 1800) -> Timed:
    """Run one command; CPU time is user + system of it and every child it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, cpu, proc.returncode, (proc.stdout + proc.stderr)[-4000:])


def edit(project: Path, lang: str) -> None:
    """Append a comment to the plugin's first source: new inputs, the same plugin."""
    manifest = tomllib.loads((project / "plugin.toml").read_text())
    path = project / manifest["build"]["sources"][0]
    path.write_text(path.read_text() + f"\n{COMMENT.get(lang, '//')} edit {secrets.token_hex(8)}\n")


def install(base: Path) -> Path:
    """Build the wheel from this checkout and install it into a fresh venv; its bin/."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(base / "dist"), str(ROOT)], env=env, check=True)
    wheel = next((base / "dist").glob("wasmext-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True)
    subprocess.run([str(base / "venv" / "bin" / "pip"), "install", "-q",
                    f"{wheel}[build,test]"], env=env, check=True)
    return base / "venv" / "bin"


def author_env(bin_dir: Path, cache: Path) -> dict[str, str]:
    """The environment an author with only the wheel has: no checkout on any path."""
    # PYTHONDONTWRITEBYTECODE too: an author's Python keeps the bytecode of what pytest
    # rewrote (every module of a distribution with a pytest plugin, wasmext's included).
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "WASMEXT_SDK_DIR", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CACHE_HOME"] = str(cache)
    if "WASMEXT_RUSTC" not in env and Path(RUSTC_DEBIAN).is_file():
        env["WASMEXT_RUSTC"] = RUSTC_DEBIAN
    return env


def loop(lang: str, bin_dir: Path, work: Path, env: dict[str, str]) -> dict[str, Timed]:
    """One language's loop; stops at the first step that fails (raises with its output)."""
    project = work / f"hello-{lang}"
    wasmext = str(bin_dir / "wasmext")
    pytest_ = [str(bin_dir / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    steps: list[tuple[str, list[str], Path]] = [
        ("new", [wasmext, "new", project.name, "--lang", lang], work),
        ("first build", [wasmext, "build"], project),
        ("first test", pytest_, project),
        ("edit", [], project),
        ("rebuild after an edit", [wasmext, "build"], project),
        ("test after the rebuild", pytest_, project),
        ("test re-run, no change", pytest_, project),
        ("build, no change", [wasmext, "build"], project),
    ]
    done: dict[str, Timed] = {}
    for name, args, cwd in steps:
        if name == "edit":
            edit(project, lang)
            continue
        done[name] = result = timed(args, cwd, env)
        if result.returncode != 0:
            raise RuntimeError(f"{lang}: {name} failed:\n{result.output}")
    return done


def _cell(figure: dict[str, float] | None) -> str:
    if figure is None:
        return "-"
    return f"{figure['wall']:.1f} / {figure['cpu']:.1f}"


def table(figures: dict[str, dict[str, object]]) -> str:
    """The figures as a Markdown table, one row per language measured: wall / CPU s."""
    heads = [*COLUMNS[:4], "edit → build → test", COLUMNS[4]]
    lines = ["| language | " + " | ".join(f"{c} (s)" for c in heads) + " | load |",
             "|---|" + "---:|" * (len(heads) + 1)]
    for lang in sorted(figures, key=lambda name: LANGS.index(name) if name in LANGS else 99):
        steps = figures[lang]["steps"]
        assert isinstance(steps, dict)
        loop_figure = None
        if all(s in steps for s in LOOP):
            loop_figure = {k: sum(steps[s][k] for s in LOOP) for k in ("wall", "cpu")}
        cells = [_cell(steps.get(c)) for c in COLUMNS[:4]]
        cells += [_cell(loop_figure), _cell(steps.get(COLUMNS[4]))]
        lines.append(f"| {lang} | " + " | ".join(cells) + f" | {figures[lang].get('load', '-')} |")
    return "\n".join(lines)


def write_docs(text: str, figures: dict[str, dict[str, object]]) -> None:
    """Replace (or add) the author-loop section of docs/sdk-figures.md."""
    dates = sorted({str(f.get("measured")) for f in figures.values()})
    body = (
        "## The author's loop\n\n"
        f"Generated by `python benchmarks/author_loop.py --write-docs` ({', '.join(dates)}); "
        "do not edit. From a wheel installed in a fresh venv, in an empty folder, one "
        "language after the other: `wasmext new`, `wasmext build`, the scaffold's pytest, "
        "an edit of the source, `wasmext build`, the pytest, and the pytest again with "
        "nothing changed. Each cell is wall / CPU seconds (CPU: user + system of every "
        "process the step started). The 2-core machine is shared: `load` is the load "
        "average when the language started; under a load of 20-30 a step waits up to ten "
        "times its CPU time, so compare runs by CPU time. The wasmext caches started empty; "
        "the toolchains' own caches (zig's, the Rust SDK's rlib, npm's) were warm; "
        "Python wrote bytecode, as an author's does. `wasmext build` compiles what it "
        "builds into the host's compile cache, so each test loads compiled code; the test "
        "re-run with no change builds and compiles nothing and starts no toolchain or "
        "`wasmext build` process (the build stamp says nothing changed). Rust builds with "
        "Debian's rustc 1.63 (`WASMEXT_RUSTC`), which has the wasm32 target here.\n\n"
        + text)
    replace_doc_section(DOCS, "author-loop", body)


def main() -> None:
    """Measure the chosen languages' loops (all by default) and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", action="append", choices=LANGS)
    ap.add_argument("--venv", type=Path, help="a venv with the wheel installed already")
    ap.add_argument("--keep", action="store_true", help="keep the projects (printed)")
    ap.add_argument("--table", action="store_true", help="only print the last figures")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--json", type=Path, default=FIGURES,
                    help=f"the figures file to add to (default {FIGURES.relative_to(ROOT)})")
    args = ap.parse_args()
    figures = json.loads(args.json.read_text()) if args.json.is_file() else {}
    if not args.table:
        base = Path(tempfile.mkdtemp(prefix="wasmext-author-loop-"))
        assert ROOT not in base.parents
        bin_dir = args.venv / "bin" if args.venv else install(base)
        failed = []
        for lang in args.lang or LANGS:
            work = base / lang
            (work / "cache").mkdir(parents=True)
            load = os.getloadavg()[0]
            try:
                steps = loop(lang, bin_dir, work, author_env(bin_dir, work / "cache"))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(exc, file=sys.stderr)
                failed.append(lang)
                continue
            figures[lang] = {
                "steps": {name: {"wall": round(t.wall, 2), "cpu": round(t.cpu, 2)}
                          for name, t in steps.items()},
                "measured": time.strftime("%Y-%m-%d", time.gmtime()), "load": round(load, 1)}
            print(f"{lang}: " + ", ".join(f"{n} {t.wall:.1f}/{t.cpu:.1f}"
                                          for n, t in steps.items()), flush=True)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
        if args.keep:
            print(f"projects kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
    text = table(figures)
    print(text)
    if args.write_docs:
        write_docs(text, figures)


if __name__ == "__main__":
    main()
