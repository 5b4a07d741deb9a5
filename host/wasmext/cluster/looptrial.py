"""The worker's loop trial: which plugins' stage calls have earned the event loop.

A plugin whose worst case is not short by rule starts on the lane. Once `PROVE_CALLS`
of its stage calls in a row ran within `short_call_ms` there, its calls run on the loop
("on trial"), each one timed. The first that runs longer demotes it: back to the lane
for `DEMOTE_S`, twice as long at each demotion after that (up to `MAX_DEMOTE_S`), then
it proves itself again. Once `max_demoted` demotions came within `demote_s` of each
other, no plugin is on trial for the next `demote_s`: a crowd of hostile plugins holds
the loop that many times in a row at most, not once each. A new version proves itself
again; a demoted one finishes its back-off first.

One small record per plugin (`Standing`) holds all of it; `LoopTrial.demoted` is the
public read (`Worker.demoted`): each demoted plugin and how long its last slow call
held the loop.
"""

from __future__ import annotations

import logging
import time
from collections import deque

__all__ = ["DEMOTE_S", "MAX_DEMOTED", "MAX_DEMOTE_S", "PROVE_CALLS", "SHORT_CALL_MS",
           "LoopTrial", "Standing"]

log = logging.getLogger("wasmext.cluster.worker")

# How long a stage call may run and still count as short: a plugin whose calls stay
# within it runs them on the loop, the first longer one sends it back to the lane.
# Four of the interpreter's GIL switch intervals (5 ms): a healthy call on the loop may
# wait one interval for the GIL at each return from the guest while another thread runs
# Python (the lane, a metrics scrape), and one such wait should not demote it.
# Every request behind a call on the loop waits as long as it runs: at most this, or,
# once per plugin, its time-out.
SHORT_CALL_MS = 20.0
# Short calls in a row on the lane before a plugin's calls run on the loop: a plugin's
# first calls (a cold instance) and a plainly slow plugin never reach the loop.
PROVE_CALLS = 8
# How long a plugin demoted for the first time stays off the loop; each demotion after
# that doubles it (up to `MAX_DEMOTE_S`). A healthy plugin that one stall of the machine
# demoted comes back; a hostile one holds the loop once per back-off.
DEMOTE_S = 60.0
MAX_DEMOTE_S = 24 * 3600.0
# Demotions within DEMOTE_S after which no plugin is on trial for DEMOTE_S: each held
# the loop for up to its plugin's time-out, and a worker may serve many plugins.
MAX_DEMOTED = 4
_DEMOTED = -1  # `Standing.proven` of a plugin sent back to the lane (for a back-off)


class Standing:
    """One plugin's place in the trial: short lane calls in a row (or demoted), when
    its back-off ends, how often it was demoted, how long its last slow call held the
    loop (ms; None: never demoted)."""

    __slots__ = ("back_on", "demotions", "held_ms", "proven")

    def __init__(self) -> None:
        self.proven = 0
        self.back_on = 0.0
        self.demotions = 0
        self.held_ms: float | None = None


class LoopTrial:
    """Which plugins run their stage calls on the worker's loop on trial, and the
    demotions that send them back to the lane."""

    def __init__(self, name: str, short_call_ms: float = SHORT_CALL_MS) -> None:
        self.name = name
        self.short_call_ms = short_call_ms
        self.short_s = short_call_ms / 1000
        self.demote_s = DEMOTE_S
        self.max_demoted = MAX_DEMOTED
        self._standing: dict[str, Standing] = {}  # by plugin id
        self._recent: deque[float] = deque(maxlen=MAX_DEMOTED)  # the latest demotions' times
        self._paused_until = 0.0  # no plugin on trial before this (time.monotonic)

    @property
    def demoted(self) -> dict[str, float]:
        """Each plugin ever demoted: ms its last slow call held the loop."""
        return {pid: s.held_ms for pid, s in self._standing.items() if s.held_ms is not None}

    def on_trial(self, pid: str) -> bool:
        """Whether `pid`'s next stage call runs on the loop (timed, `demote` if long)."""
        standing = self._standing.get(pid)
        if self.short_s <= 0 or standing is None or standing.proven < PROVE_CALLS:
            return False
        # Too many demotions lately: the trial pauses for everyone.
        return not (self._paused_until and time.monotonic() < self._paused_until)

    def proved(self, pid: str, took_s: float) -> None:
        """A lane call of `pid` ran for `took_s`: one more short call in a row, or the
        count starts again (a slow call on the lane blocks no one: no demotion). A
        demoted plugin starts counting once its back-off is over."""
        standing = self._of(pid)
        proven = standing.proven
        if proven == _DEMOTED:
            if time.monotonic() < standing.back_on:
                return
            proven = 0
        if proven < PROVE_CALLS:
            standing.proven = proven + 1 if took_s < self.short_s else 0

    def _of(self, pid: str) -> Standing:
        standing = self._standing.get(pid)
        if standing is None:
            standing = self._standing[pid] = Standing()
        return standing

    def new_version(self, pid: str) -> None:
        """`pid` is served anew (another version): it proves itself short again, unless
        it is demoted (then it finishes its back-off first)."""
        standing = self._standing.get(pid)
        if standing is not None and standing.proven != _DEMOTED:
            standing.proven = 0

    def demote(self, pid: str, kind: str, took_s: float) -> None:
        """`pid`'s call (a `kind` stage) held the loop `took_s`, longer than a short call:
        its calls go through the lane for its back-off (doubled at each demotion), then
        prove themselves again; too many demotions lately pause the trial."""
        standing = self._of(pid)
        standing.demotions += 1
        off_s = min(self.demote_s * 2 ** min(standing.demotions - 1, 32), MAX_DEMOTE_S)
        standing.proven = _DEMOTED
        now = time.monotonic()
        standing.back_on = now + off_s
        standing.held_ms = round(took_s * 1000, 3)
        recent = self._recent
        if recent.maxlen != self.max_demoted:
            recent = self._recent = deque(recent, maxlen=max(1, self.max_demoted))
        recent.append(now)
        if len(recent) == recent.maxlen and now - recent[0] < self.demote_s:
            self._paused_until = now + self.demote_s
            log.warning("worker %s: %d demotions within %g s; no plugin runs on the loop on "
                        "trial for %g s", self.name, len(recent), self.demote_s,
                        self.demote_s)
        log.warning("worker %s: a %s call of %s held the event loop %.1f ms (short: %g ms); "
                    "its calls run off the loop for %.3g s", self.name, kind, pid,
                    took_s * 1000, self.short_call_ms, off_s)
