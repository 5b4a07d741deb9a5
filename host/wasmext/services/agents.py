"""`agents.request` and `agents.send`: plugins calling agents the application registered.

    host.agents.register("reviewer", lambda text: review(text))        # a callable
    host.agents.register("helper", make_session, factory=True)         # a fresh session
                                                                       # (`.ask(input)`) per call
Grants: `agents` enables the ops; `agents:<pattern>` names the agents (fnmatch).
Only `turn` and `step` middleware may call them. Each call runs on a daemon
thread of its own (`_Runs`), bounded by `timeout_ms` (default 15 s); as with
middleware `next`, that time is not charged to the calling plugin (its deadline
restarts afterwards). The config's `[agents.NAME]` tables register agents too
(`services.agent_config`).

Agent runs are part of the call tree of the plugin call that started them
(the root call), wherever they run. What a run does travels with it in a
context variable (`_Run`), across the agent's worker thread, the call pool's
threads (`wasmext.callpool`, so an `AsyncSession` inside an agent keeps it)
and host tools' workers (`calltree.run_bounded`):

- the chain of agents it runs inside: an agent already on the chain (a
  cycle) or a chain deeper than `max_depth` is refused with `limit`;
- the root call's budget (`_Tree`): at most `max_runs_per_call` agent runs in
  all, and every run ends by `max_tree_ms` after the tree's first run, so
  neither a fan-out nor a ping-pong of `agents.send` outlives its bound;
- a call scope: a run is cancelled (its plugin calls end with `cancelled`)
  when its caller stops waiting (a request's time-out), when the caller's own
  scope is cancelled, and at its deadline (a sent run has no waiter).

At most `max_in_flight` agent calls run at once, host-wide, and at most
`max_in_flight_per_plugin` of them for one calling plugin, so that one plugin
cannot hold every slot: a storm of `agents.send` is refused, never queued.
"""

from __future__ import annotations

import contextvars
import fnmatch
import itertools
import logging
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from wasmext.errors import AgentRunNotStarted
from wasmext.sandbox import callscope, calltree
from wasmext.sandbox.callscope import CallScope
from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.services.alarms import alarms
from wasmext.text import clean

__all__ = ["GRANTABLE_NAME", "AgentRegistry", "run_asker", "run_time_left"]

log = logging.getLogger("wasmext.services.agents")

ALLOWED_HOOKS = frozenset({"turn", "step"})
_TREE_KEY = "agents"
KEPT_RESULTS = 32  # per session: the latest agents.request answers, for output extensions
KEPT_SESSIONS = 256
# A name an `agents:<name>` grant matches as typed (no pattern or shell characters), read
# with `fullmatch`: what a config may declare (`[agents.NAME]`), and the only names the
# operator's notice suggests as the grant to give.
GRANTABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class _Tree:
    """One root call's agent budget, shared by every run of its tree on any thread."""

    def __init__(self, runs: int, seconds: float) -> None:
        self.lock = threading.Lock()
        self.max_runs = runs
        self.runs_left = runs
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    def take(self) -> float:
        """Count one more run; its latest end (monotonic), or OpError('limit')."""
        with self.lock:
            if time.monotonic() >= self.ends:
                raise OpError("limit", f"the call tree's agent time ({self.seconds:g} s) is "
                              "spent")
            if self.runs_left <= 0:
                raise OpError("limit", f"the call tree has started its {self.max_runs} "
                              "agent runs")
            self.runs_left -= 1
            return self.ends


@dataclass(frozen=True)
class _Run:
    """What an agent run carries: its chain of agents, its tree, its call scope, its end."""

    chain: tuple[str, ...]
    tree: _Tree
    scope: CallScope
    ends: float  # time.monotonic() by which the run is cancelled
    asker: CallContext  # the plugin call whose agents.request or send started it


_run: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("wasmext_agent_run",
                                                                  default=None)


def run_time_left() -> float | None:
    """Seconds until the agent run in progress is cancelled; None outside any run."""
    run = _run.get()
    return None if run is None else run.ends - time.monotonic()


def run_asker() -> CallContext | None:
    """The plugin call that started the agent run in progress (what the run does on the
    world's side is that plugin's: a model agent's tokens are charged to its budgets);
    None outside any run."""
    run = _run.get()
    return None if run is None else run.asker


class _Runs:
    """Agent runs on daemon threads, one per run (the slots bound how many run at once).

    A run that outlives its deadline cannot be stopped (Python code is not
    interruptible); an executor's workers are joined when the interpreter exits, so
    such a run held `wasmext run` open long after it had printed its answer. A
    daemon thread does not. The interface is the part of an executor `_submit` uses.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._numbers = itertools.count()
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        """`fn(*args)` on a new daemon thread; RuntimeError once shut down,
        AgentRunNotStarted when the OS will not start the thread."""
        if self._closed:
            raise RuntimeError("cannot run agents after shutdown")
        future: Future[Any] = Future()

        def work() -> None:
            if self._closed:  # shut down before it started: it never starts
                future.cancel()
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args)
            except BaseException as exc:  # the waiter gets it, whatever it is
                future.set_exception(exc)
            else:
                future.set_result(result)

        thread = threading.Thread(target=work, daemon=True,
                                  name=f"{self.name}-{next(self._numbers)}")
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": a host limit, not a close
            raise AgentRunNotStarted("could not start a thread for the agent run "
                                     f"({clean(str(exc), 200)})") from exc
        return future

    def shutdown(self, wait: bool = False, *, cancel_futures: bool = True) -> None:
        """Take no more runs; one not started yet never starts (runs are not waited for)."""
        self._closed = True


class AgentRegistry:
    """The agents one Host offers to plugins."""

    def __init__(self, *, default_timeout_ms: int = 15_000, max_depth: int = 4,
                 max_in_flight: int = 16, max_in_flight_per_plugin: int | None = None,
                 max_runs_per_call: int = 64, max_tree_ms: int = 60_000) -> None:
        self.default_timeout_ms = default_timeout_ms
        self.max_depth = max_depth
        self.max_in_flight_per_plugin = max_in_flight_per_plugin or max(1, max_in_flight // 4)
        self.max_runs_per_call = max_runs_per_call  # agent runs per root call, all levels
        self.max_tree_ms = max_tree_ms  # every run of a root call ends this long after its first
        self._agents: dict[str, tuple[Callable[..., Any], bool]] = {}
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._lock = threading.Lock()
        self._per_plugin: dict[str, int] = {}
        self._pool = _Runs("wasmext-agent")
        # What agents.request answered in each session since the last `take_results`:
        # reference 003's child results, shown to the turn's output extensions.
        self._results: OrderedDict[str, deque[dict[str, Any]]] = OrderedDict()

    def register(self, name: str, target: Callable[..., Any], *, factory: bool = False) -> None:
        """`target(input) -> answer`; with factory=True, `target()` makes a session whose
        `ask(input)` answers (closed afterwards when it has `close`)."""
        if not name or len(name) > 128:
            raise ValueError("an agent name is 1 to 128 characters")
        self._agents[name] = (target, factory)

    def unregister(self, name: str) -> None:
        """Forget agent `name` (runs in progress finish)."""
        self._agents.pop(name, None)

    def names(self) -> list[str]:
        """The registered agents' names, sorted."""
        return sorted(self._agents)

    def install(self, services: HostServices) -> None:
        """Register agents.request and agents.send."""
        services.register("agents.request", self.request)
        services.register("agents.send", self.send)

    def take_results(self, session_id: str) -> list[dict[str, Any]]:
        """The child-agent runs of a session since the last take (at most KEPT_RESULTS):
        `{agent, requested_by, success, output, error, duration_ms}` each, oldest first."""
        with self._lock:
            kept = self._results.pop(session_id, None)
        return list(kept or ())

    def _keep(self, session_id: str | None, record: dict[str, Any]) -> None:
        if session_id is None:
            return
        with self._lock:
            kept = self._results.get(session_id)
            if kept is None:
                kept = self._results[session_id] = deque(maxlen=KEPT_RESULTS)
                while len(self._results) > KEPT_SESSIONS:
                    self._results.popitem(last=False)
            kept.append(record)

    def close(self) -> None:
        """Stop taking runs; queued ones never start."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the ops -------------------------------------------------------------------

    def _target(self, ctx: CallContext, req: dict[str, Any]) -> tuple[str, Callable[..., Any],
                                                                      bool]:
        name = req.get("agent")
        if not isinstance(name, str) or "input" not in req:
            raise OpError("invalid", "agents.* needs 'agent' (a string) and 'input'")
        if ctx.hook not in ALLOWED_HOOKS:
            raise OpError("denied", f"agents.* is allowed in turn and step middleware, "
                          f"not in {str(ctx.hook)[:64]!r}")
        if not any(fnmatch.fnmatchcase(name, g[7:]) for g in ctx.grants
                   if g.startswith("agents:")):
            # Only a registered agent's name goes into the grant to suggest: those are
            # the operator's, checked names; what else the plugin asked for is its text.
            raise OpError("denied", f"agent {name[:64]!r} is not granted (needs "
                          "agents:<pattern>)",
                          f"agents:{name}" if name in self._agents and
                          GRANTABLE_NAME.fullmatch(name) else None)
        found = self._agents.get(name)
        if found is None:
            raise OpError("not_found", f"no agent {name[:64]!r} is registered")
        run = _run.get()
        chain = run.chain if run is not None else ()
        if run is not None and run.scope.cancelled.is_set():
            raise OpError("timeout", "this agent run was abandoned by its caller")
        if name in chain:
            raise OpError("limit", f"agent cycle: {' -> '.join((*chain, name))}"[:512])
        if len(chain) >= self.max_depth:
            raise OpError("limit", f"agent calls nested deeper than {self.max_depth}")
        return name, *found

    def _tree(self) -> _Tree:
        """The root call's budget: the run's own when inside one, else the call tree's."""
        run = _run.get()
        if run is not None:
            return run.tree
        tree = calltree.tree_state(_TREE_KEY, lambda: _Tree(self.max_runs_per_call,
                                                            self.max_tree_ms / 1000))
        # Outside any plugin call (an application calling the op itself): a tree of its own.
        return tree if tree is not None else _Tree(self.max_runs_per_call,
                                                   self.max_tree_ms / 1000)

    def _take_slot(self, pid: str) -> None:
        with self._lock:
            held = self._per_plugin.get(pid, 0)
            if held >= self.max_in_flight_per_plugin:
                raise OpError("limit", f"plugin {pid} has {held} agent calls in flight "
                              "(its share of the host's agent slots)")
            if not self._slots.acquire(blocking=False):
                raise OpError("limit", "too many agent calls in flight")
            self._per_plugin[pid] = held + 1

    def _give_slot(self, pid: str) -> None:
        with self._lock:
            left = self._per_plugin.get(pid, 1) - 1
            if left > 0:
                self._per_plugin[pid] = left
            else:
                self._per_plugin.pop(pid, None)
            self._slots.release()

    def _submit(self, ctx: CallContext, name: str, target: Callable[..., Any], factory: bool,
                data: Any, timeout_s: float) -> tuple[Future[Any], CallScope, float]:
        """Start one run; its future, its scope and its deadline (monotonic)."""
        tree = self._tree()
        self._take_slot(ctx.plugin_id)
        try:
            ends = min(tree.take(), time.monotonic() + timeout_s)
        except OpError:
            self._give_slot(ctx.plugin_id)
            raise
        previous = _run.get()
        scope = CallScope()
        run = _Run((*(previous.chain if previous else ()), name), tree, scope, ends, ctx)
        # A cancel of the caller (its own scope, or its run's) reaches this run too.
        caller = callscope.current()
        forget_caller = caller.on_cancel(scope.cancel) if caller is not None else None
        forget_parent = previous.scope.on_cancel(scope.cancel) if previous else None
        stop_alarm = alarms().at(ends, scope.cancel)
        pid = ctx.plugin_id

        def finish() -> None:
            stop_alarm()
            for forget in (forget_caller, forget_parent):
                if forget is not None:
                    forget()
            self._give_slot(pid)

        def run_agent() -> Any:
            _run.set(run)
            try:
                with scope.bound():
                    if scope.cancelled.is_set():
                        raise OpError("timeout", f"agent {name!r} was abandoned before it "
                                      "started")
                    if not factory:
                        return target(data)
                    session = target()
                    try:
                        return session.ask(data)
                    finally:
                        close = getattr(session, "close", None)
                        if callable(close):
                            close()
            finally:
                finish()

        try:
            future = self._pool.submit(contextvars.copy_context().run, run_agent)
        except AgentRunNotStarted as err:
            finish()
            # The host's trouble (its thread limit), which the operator must learn of.
            log.warning("agent %s for plugin %s: %s", name, pid, err.message,
                        extra={"plugin_id": pid, "session": ctx.session, "hook": ctx.hook})
            raise
        except RuntimeError:  # the pool was shut down
            finish()
            raise OpError("unavailable", "the host is closing") from None
        # A run cancelled while queued never starts: its slot is given back here.
        future.add_done_callback(lambda done: finish() if done.cancelled() else None)
        return future, scope, ends

    def request(self, ctx: CallContext, req: dict[str, Any]) -> Any:
        """agents.request: run the agent and answer with its answer."""
        name, target, factory = self._target(ctx, req)
        timeout_ms = req.get("timeout_ms", self.default_timeout_ms)
        if type(timeout_ms) is not int or timeout_ms <= 0:
            raise OpError("invalid", "'timeout_ms' must be a positive int")
        # Like middleware `next`, the agent's time is not the plugin's: its deadline
        # restarts when the answer comes (CallContext.nested_seconds).
        started = time.perf_counter()
        future, scope, ends = self._submit(ctx, name, target, factory, req["input"],
                                           timeout_ms / 1000)
        record: dict[str, Any] = {"agent": name, "requested_by": ctx.plugin_id,
                                  "success": False, "output": None, "error": None}
        try:
            output = future.result(timeout=max(0.0, ends - time.monotonic()))
            if scope.cancelled.is_set():
                # Its deadline's alarm (or the caller's cancel) cut the run before this
                # wait ended (a loaded machine wakes the waiter late): what the agent
                # answered after its plugins were cancelled is not its answer.
                raise FutureTimeout
            record["output"] = output
            record["success"] = True
            return record["output"]
        except FutureTimeout:
            if not future.cancel():  # queued: it never starts; started: its plugins end now
                scope.cancel()
            record["error"] = "timeout"
            raise OpError("timeout", f"agent {name!r} did not answer in time") from None
        except OpError as err:
            record["error"] = err.code
            raise
        except Exception as exc:
            # An agent's exception often quotes its input, which the plugin wrote.
            log.warning("agent %s failed for plugin %s: %s: %s", name, ctx.plugin_id,
                        type(exc).__name__, clean(str(exc), 300),
                        extra={"plugin_id": ctx.plugin_id, "session": ctx.session,
                               "hook": ctx.hook})
            record["error"] = f"failed: {type(exc).__name__}"
            raise OpError("failed", f"agent {name!r} failed: {type(exc).__name__}") from None
        finally:
            ctx.nested_seconds += time.perf_counter() - started  # the agent's time, not ours
            record["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
            self._keep(ctx.session, record)

    def send(self, ctx: CallContext, req: dict[str, Any]) -> None:
        """agents.send: start the agent and answer at once (its answer is dropped)."""
        name, target, factory = self._target(ctx, req)
        future, _, _ = self._submit(ctx, name, target, factory, req["input"],
                                    self.default_timeout_ms / 1000)

        def report(done: Future[Any]) -> None:
            exc = done.exception() if not done.cancelled() else None
            if exc is not None:
                log.warning("agent %s (sent by plugin %s) failed: %s: %s", name,
                            ctx.plugin_id, type(exc).__name__, clean(str(exc), 300),
                            extra={"plugin_id": ctx.plugin_id, "session": ctx.session,
                                   "hook": ctx.hook})
        future.add_done_callback(report)
