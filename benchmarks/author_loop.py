"""The plugin author's loop per language, as the installed-wheel test measured it.

    python -m pytest -m slow tests/test_installed_wheel.py   # writes the figures
    python benchmarks/author_loop.py [--write-docs]

tests/test_installed_wheel.py runs, from a wheel installed in a fresh venv,
`wasmext new`, `wasmext build`, the scaffold's pytest, an edit of the source, the
rebuild, and the pytest re-run with nothing changed, timing each step into
benchmarks/results/author-loop.json. This prints them as a table and, with
`--write-docs`, puts the table in docs/sdk-figures.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIGURES = HERE / "results" / "author-loop.json"
DOCS = HERE.parent / "docs" / "sdk-figures.md"
BEGIN, END = "<!-- author-loop:begin -->", "<!-- author-loop:end -->"
COLUMNS = ("first build", "first test", "rebuild after an edit", "test after the rebuild",
           "test re-run, no change")
ORDER = ("c", "zig", "rust", "go", "assemblyscript", "python", "javascript")


def table(figures: dict[str, dict[str, object]]) -> str:
    """The figures as a Markdown table, one row per language measured."""
    lines = ["| language | " + " | ".join(f"{c} (s)" for c in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    for lang in sorted(figures, key=lambda name: ORDER.index(name) if name in ORDER else 99):
        seconds = figures[lang]["seconds"]
        assert isinstance(seconds, dict)
        cells = [f"{seconds[c]:.1f}" if c in seconds else "-" for c in COLUMNS]
        lines.append(f"| {lang} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_docs(text: str, dates: set[str]) -> None:
    """Replace (or add) the author-loop section of docs/sdk-figures.md."""
    doc = DOCS.read_text()
    section = (f"{BEGIN}\n## The author's loop\n\nMeasured by `tests/test_installed_wheel.py` "
               f"({', '.join(sorted(dates))}) from a wheel installed in a fresh venv, the "
               "selected languages' projects building at once on this project's 2-core "
               "machine, which other jobs shared (load average 6-9): read them as upper "
               "bounds; rendered by `python benchmarks/author_loop.py --write-docs`; do not edit. "
               "`wasmext build` also compiles the module into the host's compile cache, so "
               "a build's time includes the compile a first load used to pay, and each test "
               "run loads compiled code. The re-run with no change builds nothing.\n\n"
               + text + f"\n{END}")
    if BEGIN in doc:
        head, _, rest = doc.partition(BEGIN)
        _, _, tail = rest.partition(END)
        doc = head + section + tail
    else:
        doc = doc.rstrip("\n") + "\n\n" + section + "\n"
    DOCS.write_text(doc)


def main() -> None:
    """Print the table; with --write-docs also put it in docs/sdk-figures.md."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    figures = json.loads(FIGURES.read_text())
    text = table(figures)
    print(text)
    if args.write_docs:
        write_docs(text, {str(f.get("measured")) for f in figures.values()})


if __name__ == "__main__":
    main()
