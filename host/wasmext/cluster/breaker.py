"""A circuit breaker per remote extension: closed, open, half-open.

After `failures` failures in a row the circuit opens: calls fail at once, without
touching the network, for `reset_s`; then one trial call goes through
(half-open): its success closes the circuit, its failure opens it again.

"In a row" is about evidence, not arrival order. Requests that were all in flight
when one worker died time out together; counting each would open the circuit for
a service whose other workers answer the retries. So a failed attempt that began
before the last counted failure was recorded adds nothing: it is the same event.
"""

from __future__ import annotations

import threading
import time

__all__ = ["Breaker"]


class Breaker:
    """One remote extension's circuit: closed, open or half-open."""

    def __init__(self, failures: int, reset_s: float) -> None:
        self.threshold, self.reset_s = failures, reset_s
        self.failures = 0
        self.opened_at: float | None = None
        self._trial = False
        self._last_counted = float("-inf")  # when the newest counted failure was seen
        self.last_reason = ""  # the newest counted failure's, for the open circuit's text
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        """The circuit's state now: "closed", "open" or "half_open"."""
        with self._lock:
            return self._state(time.monotonic())

    def _state(self, now: float) -> str:
        if self.opened_at is None:
            return "closed"
        return "half_open" if now - self.opened_at >= self.reset_s else "open"

    def allow(self) -> bool:
        """May a call go out now? (In half-open, only one trial at a time.)"""
        if self.opened_at is None:  # closed: one read, as under the lock (set whole)
            return True
        with self._lock:
            state = self._state(time.monotonic())
            if state == "closed":
                return True
            if state == "half_open" and not self._trial:
                self._trial = True
                return True
            return False

    def succeeded(self) -> None:
        """A call succeeded: close the circuit and reset the count."""
        if not self.failures and self.opened_at is None and not self._trial:
            return  # nothing to reset: the common case takes no lock
        with self._lock:
            self.failures, self.opened_at, self._trial = 0, None, False

    def failed(self, started: float | None = None, reason: str = "") -> None:
        """An attempt that began at `started` (time.monotonic) failed, for `reason`
        (already one clean line); None: just now."""
        with self._lock:
            now = time.monotonic()
            if started is not None and started < self._last_counted:
                return  # in flight alongside a failure already counted
            self._last_counted = now
            self.failures += 1
            self.last_reason = reason
            if self._trial or self.failures >= self.threshold:
                self.opened_at, self._trial = now, False

    def refusal(self) -> str:
        """Why a call is refused now: the open circuit, what opened it and when the
        next trial call goes out (an operator reading only "circuit open" cannot tell
        a typo in a subject from a crowded worker, nor how long to wait)."""
        with self._lock:
            failures, reason, opened = self.failures, self.last_reason, self.opened_at
        why = f"{failures} failure{'s' if failures != 1 else ''} in a row"
        if reason:
            why += f", the last: {reason}"
        if opened is None:
            return f"circuit open ({why})"
        left = max(0.0, opened + self.reset_s - time.monotonic())
        trial = (f"a trial call in {left:.1f} s" if left > 0
                 else "a trial call is under way")
        return f"circuit open ({why}; {trial})"
