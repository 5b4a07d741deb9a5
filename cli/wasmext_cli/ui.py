"""Terminal output through rich: colour and live status only on a terminal.

rich already leaves colour out when NO_COLOR is set or the stream is not a
terminal; these consoles add nothing else, so piped output stays plain text.
"""

from __future__ import annotations

import sys

from rich.console import Console

__all__ = ["stderr_console", "stdout_console"]


def stderr_console() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    return Console(file=sys.stdout, highlight=False, soft_wrap=True)
