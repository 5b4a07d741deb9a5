"""The `wasmext` command group: whatever a command raises reaches the user as one line.

Every command of the group, each one `wasmext_cli.main.COMMANDS` names and
those of nested groups, runs inside
`WasmextGroup.invoke`, so no traceback is ever printed: a WasmextError prints
its one-line description, an OS or network error (a model endpoint that
refuses the connection, an unreadable file) its message, anything else its
type and message. WASMEXT_DEBUG=1 lets the exception through, traceback and all.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import click

__all__ = ["EXIT_FAULT", "WasmextGroup", "error_line"]

EXIT_FAULT = 1
PREFIX = "wasmext: "
LIMIT = 1000


def error_line(exc: BaseException) -> str:
    """`exc` as the one line the CLI prints, with a single "wasmext: " in front."""
    from wasmext import WasmextError  # only on failure: `--help` never loads the host
    from wasmext.text import clean

    if isinstance(exc, WasmextError):
        text = exc.describe()
    elif isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in ("httpx",
                                                                          "httpcore"):
        # URLError/ConnectError and friends: the message names what failed.
        reason = getattr(exc, "reason", None)
        text = f"{type(exc).__name__}: {reason or exc or type(exc).__name__}"
    else:
        text = f"unexpected {type(exc).__name__}: {exc}"
    text = clean(" ".join(text.split()), LIMIT)
    while text.startswith(PREFIX):
        text = text[len(PREFIX):]
    return PREFIX + text


class WasmextGroup(click.Group):
    """The command group: an unexpected error prints one line and exits with EXIT_FAULT."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an unexpected error is one line (WASMEXT_DEBUG=1 raises it)."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort,
                SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            # The reader went away (`wasmext run | head`): nothing is wrong with wasmext,
            # so no error line; stdout goes to /dev/null so that the interpreter's final
            # flush does not raise again.
            with contextlib.suppress(OSError, ValueError):  # a stdout with no descriptor
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(EXIT_FAULT)
        except Exception as exc:
            if os.environ.get("WASMEXT_DEBUG"):
                raise
            click.echo(error_line(exc), err=True)
            sys.exit(EXIT_FAULT)
