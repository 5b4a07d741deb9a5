"""Objects that start their own threads or hold connections, made to work again in a
forked child.

A child forked from a process that started threads has none of them, yet an object
that started one still names it (and a lock it held may stay held): a bus waits on a
worker that is not there, a ticker never ticks. Such an object registers here and its
`_after_fork` runs in every forked child, before the child's own code.

An object whose operation must not be cut in half by the fork (a SQLite transaction:
its file locks are the parent's, its half-written state the child cannot tell apart
from its own) also quiesces: its `_before_fork` runs in the forking thread before the
fork and may wait, within its own bound, for the operation in flight to end; its
`_after_fork_in_parent` runs in the parent afterwards (`FORK_WAIT_S` is the bound
the stores use).
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["FORK_WAIT_S", "Forkable", "Quiescent", "quiesce_at_fork", "renew_in_children"]

FORK_WAIT_S = 2.0  # how long a fork waits for an object's operation in flight to end


class Forkable(Protocol):
    """What `renew_in_children` calls in a forked child."""

    def _after_fork(self) -> None: ...


class Quiescent(Forkable, Protocol):
    """What `quiesce_at_fork` calls around a fork, besides `_after_fork` in the child."""

    def _before_fork(self) -> None: ...

    def _after_fork_in_parent(self) -> None: ...


_RENEWED: weakref.WeakSet[Forkable] = weakref.WeakSet()  # kept no longer than their owners
_QUIESCED: weakref.WeakSet[Quiescent] = weakref.WeakSet()
_held: list[Quiescent] = []  # quiesced for the fork under way (their parent hook is owed)


def renew_in_children(obj: Forkable) -> None:
    """Run `obj._after_fork()` in each child this process forks while `obj` lives."""
    _RENEWED.add(obj)


def quiesce_at_fork(obj: Quiescent) -> None:
    """`renew_in_children(obj)`, and around each fork `obj._before_fork()` (in the forking
    thread, before it) and `obj._after_fork_in_parent()` (in the parent, after it)."""
    _QUIESCED.add(obj)
    _RENEWED.add(obj)


def _before() -> None:
    # Only the objects quiesced here get their parent hook: one registered while a
    # _before_fork waited was never quiesced.
    _held[:] = list(_QUIESCED)
    for obj in _held:
        obj._before_fork()


def _parent() -> None:
    held = list(_held)
    _held.clear()
    for obj in held:
        obj._after_fork_in_parent()


def _renew() -> None:
    _held.clear()
    for obj in list(_RENEWED):
        obj._after_fork()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(before=_before, after_in_parent=_parent, after_in_child=_renew)
