"""Terminal output through rich: colour and live status only on a terminal.

rich already leaves colour out when NO_COLOR is set or the stream is not a
terminal; these consoles add nothing else, so piped output stays plain text.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from wasmext.text import clean

if TYPE_CHECKING:  # rich comes with the first console: a piped `call` never needs one
    from rich.console import Console

__all__ = ["compile_spinner", "print_list_table", "show_compiles", "stderr_console",
           "stdout_console"]


def stderr_console() -> Console:
    """A rich console on stderr."""
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    """A rich console on stdout."""
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


def compile_spinner(console: Console | None = None
                    ) -> Callable[[str], AbstractContextManager[object]] | None:
    """What wraps a cold compile on a terminal: a spinner naming the module (its file
    name, cleaned) until the compile ends; None when the console (stderr) is not a
    terminal, so piped and logged output stays as it was."""
    if console is None and not _may_be_terminal(sys.stderr):
        return None  # what rich would decide, without importing it
    console = console or stderr_console()
    if not console.is_terminal:
        return None

    from rich.text import Text

    def spinner(name: str) -> AbstractContextManager[object]:
        shown = clean(PurePath(name).name or name, 120)
        return console.status(Text(f"compiling {shown} (first load; cached afterwards)"))

    return spinner


def _may_be_terminal(stream: Any) -> bool:
    """False only where rich's `Console.is_terminal` is surely false: TTY_COMPATIBLE=0,
    or neither TTY_COMPATIBLE=1 nor FORCE_COLOR set and the stream no terminal."""
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible == "0":
        return False
    if tty_compatible == "1" or os.environ.get("FORCE_COLOR") is not None:
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream: rich says False
        return False


def show_compiles() -> None:
    """Show a spinner on stderr, when it is a terminal, while this process compiles a
    module the compile cache did not have (a component can take a minute)."""
    from wasmext.sandbox.cache import observe_compiles

    observe_compiles(compile_spinner())


def print_list_table(plugins: list[dict[str, Any]], order: dict[str, list[dict[str, Any]]]
                     ) -> bool:
    """`wasmext list` as two tables when stdout is a terminal; False (print nothing) when
    it is not, so pipes and scripts get the plain lines. Every cell is cleaned text,
    passed as a Text so rich markup in a plugin's name is shown, never interpreted."""
    if not _may_be_terminal(sys.stdout):
        return False  # what rich would decide, without importing it
    console = stdout_console()
    if not console.is_terminal:
        return False
    from rich.table import Table
    from rich.text import Text

    table = Table("plugin", "source", "failure", "state", "asks for", title="plugins")
    for p in plugins:
        asks = ", ".join(p.get("capabilities", ())) or "-"
        table.add_row(Text(clean(p["id"], 128)), Text(p["source"]), Text(p["failure"]),
                      Text("enabled" if p.get("enabled", True) else "disabled"),
                      Text(clean(asks, 256)))
    console.print(table)
    hooks = Table("hook", "order (priority)", title="hook order")
    for hook, entries in order.items():
        chain = " -> ".join(f"{e['plugin']}({e['priority']})" for e in entries)
        hooks.add_row(Text(clean(hook, 128)), Text(clean(chain)))
    console.print(hooks)
    return True
