"""Objects that start their own threads, made to work again in a forked child.

A child forked from a process that started threads has none of them, yet an object
that started one still names it (and a lock it held may stay held): a bus waits on a
worker that is not there, a ticker never ticks. Such an object registers here and its
`_after_fork` runs in every forked child, before the child's own code.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["Forkable", "renew_in_children"]


class Forkable(Protocol):
    """What `renew_in_children` calls in a forked child."""

    def _after_fork(self) -> None: ...


_RENEWED: weakref.WeakSet[Forkable] = weakref.WeakSet()  # kept no longer than their owners


def renew_in_children(obj: Forkable) -> None:
    """Run `obj._after_fork()` in each child this process forks while `obj` lives."""
    _RENEWED.add(obj)


def _renew() -> None:
    for obj in list(_RENEWED):
        obj._after_fork()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_renew)
