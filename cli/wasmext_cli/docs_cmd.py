"""`wasmext docs`: the project's guides by topic, from the wheel or the checkout.

An installed wheel carries README.md, docs/ and abi/SPEC.md (hatch_build.py), laid out
as in the checkout so the links between them resolve; a topic is a page's file name
without `.md` (`spec` for the ABI's specification, `readme` for the README).
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

import click

from wasmext.text import clean
from wasmext_cli.common import EXIT_USAGE

__all__ = ["docs", "docs_root", "topics"]


def docs_root() -> Path:
    """Where README.md, docs/ and abi/ are: the wheel's copy, else this checkout."""
    shipped = Path(str(resources.files("wasmext_cli") / "_data"))
    if (shipped / "docs").is_dir():
        return shipped
    return Path(__file__).resolve().parents[2]


def topics(root: Path) -> dict[str, Path]:
    """Each topic and its page below `root`, in the order `wasmext docs` lists them."""
    found = {"readme": root / "README.md", "spec": root / "abi" / "SPEC.md"}
    found.update((page.stem, page) for page in sorted((root / "docs").glob("*.md")))
    return {name: page for name, page in found.items() if page.is_file()}


def _title(page: Path) -> str:
    """A page's first heading, without its hashes."""
    with page.open(encoding="utf-8") as text:
        for line in text:
            if line.startswith("#"):
                return line.lstrip("#").strip()
    return ""


@click.command()
@click.argument("topic", required=False)
@click.option("--path", "path_only", is_flag=True, help="Print where the page is, not the page.")
def docs(topic: str | None, path_only: bool) -> None:
    """List the guides, or print one (TOPIC: a page's name, e.g. cluster or spec)."""
    root = docs_root()
    pages = topics(root)
    if topic is None:
        click.echo(f"wasmext's guides, in {root}:")
        for name, page in pages.items():
            click.echo(f"  {name:24} {_title(page)}")
        click.echo("`wasmext docs TOPIC` prints one; `--path` says where it is.")
        return
    chosen = pages.get(topic.lower().removesuffix(".md"))
    if chosen is None:
        near = difflib.get_close_matches(topic.lower(), list(pages), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        click.echo(f"wasmext: no guide {clean(topic, 60)!r}{hint}; `wasmext docs` lists them",
                   err=True)
        raise SystemExit(EXIT_USAGE)
    click.echo(str(chosen) if path_only else chosen.read_text(encoding="utf-8"), nl=path_only)
