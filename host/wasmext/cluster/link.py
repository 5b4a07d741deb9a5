"""One NATS connection on its own event-loop thread, for synchronous callers.

The pipeline is synchronous (plugin calls block a thread); nats-py is asyncio.
`NatsLink` runs the client on a private loop and hands out blocking `request`
and `run`; any number of threads may call them at once. A blocking `request` takes no
coroutine, task or timer of its own: the link has one reply subscription, a thread
queues its request for the loop (one wake-up for all those queued meanwhile) and waits
on a future that the answer completes; a timeout is the thread's own wait.

An async caller opens its link on its own loop instead (`await NatsLink.open(url)`):
no thread, and `arequest` (which `Router.arun` uses) publishes and awaits one future
(its timeout a timer shared by the requests due in the same `TICK_S`), without the
two thread hops of `run_coroutine_threadsafe` and `future.result`. Threads may still
call the blocking `request` of such a link; its own loop may not.

Both kinds of link, and a worker's stage endpoints, take their messages straight from
the reader (`cluster.fastclient`'s `deliver_now`: no queue, task or callback coroutine
per message) and queue what they send without a coroutine (`publish_soon`: a lone
request written at once), falling back to nats-py's own paths wherever it would wait,
refuse or read a status line.

A process forked after opening a link (a pre-fork server's workers) has neither its
loop's thread nor a connection of its own: the socket is the parent's, and a reply to
the child could be read by the parent. The child's first use of a threaded link starts
a loop and connects again, the parent's connection never written to nor closed there
(subscriptions made on the parent's client stay the parent's). A link opened on the
parent's event loop is refused in the child (`NatsLinkForked`): that loop's selector
is shared with the parent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from wasmext.cluster.fastclient import header_block, new_client, parse_headers
from wasmext.cluster.natsauth import NatsAuth, redact
from wasmext.errors import NatsAuthFailed, NatsLinkForked, NatsUnavailable
from wasmext.forks import renew_in_children
from wasmext.ids import random_hex
from wasmext.loops import new_event_loop, stop_in_thread
from wasmext.text import clean, redact_url

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

__all__ = ["NatsAuth", "NatsAuthFailed", "NatsLink", "NatsLinkForked", "NatsUnavailable",
           "connect", "header_block", "parse_headers"]

T = TypeVar("T")
log = logging.getLogger("wasmext.cluster.link")
# How late an awaited request may time out: the requests due within one tick share a
# timer (a timer each, set and cancelled per request, was a heap push and pop apiece).
TICK_S = 0.005
# What a forked child inherited and must leave alone: collected, a loop or client could
# close what the parent still uses (its selector's registrations, its socket).
_ABANDONED: list[object] = []


# What nats-server says (-ERR) when it refuses a login: a wrong token, user, password,
# nkey or credentials file, or an expired user JWT.
_REFUSALS = ("authorization violation", "authentication expired", "authentication revoked",
             "account authentication expired")


def _refused_login(text: str) -> bool:
    """Whether an error's text is the server refusing the client's login."""
    lowered = text.lower()
    return any(r in lowered for r in _REFUSALS)


async def connect(url: str, name: str, timeout_s: float = 5.0, *,
                  auth: NatsAuth | None = None) -> Client:
    """A connection that fails fast the first time and then reconnects for ever,
    authenticated by `auth` (None: by the WASMEXT_NATS_* environment).

    nats-py logs a traceback per failed attempt by default; here each is one line,
    with the url's and `auth`'s secrets redacted, as in every error raised here.
    """
    auth = auth if auth is not None else NatsAuth().with_env()
    shown = redact_url(url)

    def said(exc: BaseException) -> str:
        return clean(redact(str(exc) or type(exc).__name__, url, auth))

    seen: list[str] = []  # what went wrong while connecting (the server's reason first)

    async def error(exc: Exception) -> None:
        if len(seen) < 8:
            seen.append(said(exc))
        if "authorization" in str(exc).lower() or "permissions" in str(exc).lower():
            log.warning("nats %s: %s", name, said(exc))
        else:
            log.debug("nats %s: %s", name, said(exc))

    async def disconnected() -> None:
        log.warning("nats %s: disconnected from %s, reconnecting", name, shown)

    async def reconnected() -> None:
        log.warning("nats %s: reconnected to %s", name, shown)

    try:
        options = auth.options()
    except (OSError, ValueError) as exc:  # a TLS file that cannot be read or used
        raise NatsUnavailable(f"cannot connect to {shown}: TLS: {said(exc)}") from None
    client = new_client()
    try:
        # nats-py annotates both times as int; it uses them as floats.
        times: dict[str, Any] = {"connect_timeout": timeout_s, "reconnect_time_wait": 0.2}
        await client.connect(url, name=name, allow_reconnect=True, max_reconnect_attempts=1,
                             error_cb=error, disconnected_cb=disconnected,
                             reconnected_cb=reconnected, **times, **options)
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "nkeys":
            raise NatsUnavailable(f"cannot connect to {shown}: an nkey or credentials login"
                                  " needs the nkeys package: pip install 'wasmext[nats]'"
                                  ) from None
        if _refused_login(str(exc)) or any(_refused_login(e) for e in seen):
            # Named, and without the server's retry noise; the secret was never in it.
            raise NatsAuthFailed(f"cannot connect to {shown}: authorization failed"
                                 " (the server refused the login)") from None
        # A refused login is followed by a broken pipe on the retry: the refusal is news.
        reason = next((e for e in seen if "authoriz" in e.lower()), seen[-1] if seen else "")
        why = said(exc) if not reason or reason in said(exc) else f"{reason} ({said(exc)})"
        raise NatsUnavailable(f"cannot connect to {shown}: {why}") from None
    # A restarted server must not leave the process cut off: once connected, retry
    # for ever (nats-py reads the option at each reconnect).
    client.options["max_reconnect_attempts"] = -1
    return client


def down_note(link: Any) -> str:
    """What a timed-out request's reason adds while `link`'s client reconnects: requests
    made meanwhile wait in its buffer and time out, so the operator should look at the
    server, not at the workers ("" while connected, or for a link that cannot tell)."""
    client = getattr(link, "client", None)
    return "" if getattr(client, "is_connected", True) \
        else " (the NATS connection is down, reconnecting)"


def _answered(msg: Msg) -> Msg:
    """The answer, or NoRespondersError when it is the server's "nobody listens"."""
    if msg.headers and msg.headers.get("Status") == "503":
        from nats.errors import NoRespondersError  # looked up only for the rare refusal

        raise NoRespondersError
    return msg


def _expire(future: asyncio.Future[Msg]) -> None:
    from nats.errors import TimeoutError as NatsTimeout

    if not future.done():
        future.set_exception(NatsTimeout())


class _Replies:
    """Blocking requests from threads, without a coroutine, task and timer per request:
    one reply subscription per link (`<inbox>.<n>`), requests queued for the loop and
    published by one task that takes every request queued meanwhile (a burst from many
    threads costs one wake-up of the loop), each answer handed straight to the waiting
    thread's future. A thread that gives up removes its entry: a late answer is dropped."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop) -> None:
        self.client, self.loop = client, loop
        self.prefix = client.new_inbox() + "."
        self.waiting: dict[str, concurrent.futures.Future[Msg] | asyncio.Future[Msg]] = {}
        self._outbox: deque[tuple[str, bytes, dict[str, str], str,
                                  concurrent.futures.Future[Msg]]] = deque()
        self._lock = threading.Lock()
        self._sending = False
        self._ids = itertools.count()
        # A peer sent one request sees its reply subject: a token it could guess would let
        # it answer this link's other requests (to other workers) ahead of them.
        self._due: dict[int, list[str]] = {}  # tokens of awaited requests by expiry tick
        self._soon: Callable[..., bool] | None = getattr(client, "publish_soon", None)

    def _token(self) -> str:
        """A new request's token: unique (the count) and unguessable (64 random bits, cut
        from `random_hex`'s buffered `os.urandom`: no system call per request)."""
        return f"{next(self._ids):x}{random_hex()[:16]}"

    async def start(self) -> None:
        """Subscribe to this link's replies (on the link's loop)."""
        sub = await self.client.subscribe(self.prefix + "*", cb=self._on_reply)
        deliver_now = getattr(self.client, "deliver_now", None)
        if deliver_now is not None:  # answers reach their futures as they are read
            deliver_now(sub, self._answer)

    async def _on_reply(self, msg: Msg) -> None:
        self._answer(msg)

    def _answer(self, msg: Msg) -> None:
        future = self.waiting.pop(msg.subject[len(self.prefix):], None)
        if future is not None:  # a thread's, or a task's on this loop; either may be over
            try:  # noqa: SIM105 (contextlib.suppress: an object and two calls per answer)
                future.set_result(msg)
            except (concurrent.futures.InvalidStateError, asyncio.InvalidStateError):
                pass

    def _publish_soon(self, subject: str, data: bytes, headers: dict[str, str],
                      inbox: str) -> bool:
        """Queue a request for the socket without a coroutine (`publish_soon`: written at
        once when it is the only one waiting); False when nats-py would wait or refuse."""
        soon = self._soon
        if soon is None:
            return False
        try:
            return soon(subject, data, header_block(headers), inbox,
                        alone=len(self.waiting) == 1)
        except ValueError:  # a header name nats-py refuses: it raises its own error
            return False

    async def _publish(self, subject: str, data: bytes, headers: dict[str, str],
                       inbox: str) -> None:
        """Publish a request: `_publish_soon` when it can, else nats-py's `publish`."""
        if not self._publish_soon(subject, data, headers, inbox):
            await self.client.publish(subject, data, reply=inbox, headers=headers)

    async def arequest(self, subject: str, data: bytes, headers: dict[str, str],
                       timeout_s: float) -> Msg:
        """One request/reply awaited on the link's own loop: one future, and a timer
        shared with the requests due in the same tick."""
        token = self._token()
        future: asyncio.Future[Msg] = self.loop.create_future()
        waiting = self.waiting
        waiting[token] = future
        try:
            if not self._publish_soon(subject, data, headers, self.prefix + token):
                await self._publish(subject, data, headers, self.prefix + token)
            self._expire_after(timeout_s, token)
            msg = await future
        finally:
            waiting.pop(token, None)
        return _answered(msg)

    def _expire_after(self, timeout_s: float, token: str) -> None:
        """Time `token`'s request out after `timeout_s`, at most `TICK_S` late: requests
        due in the same tick share one loop timer, and an answered one cancels nothing
        (its token has left `waiting`; the tick finds no future for it)."""
        tick = math.ceil((self.loop.time() + timeout_s) / TICK_S)
        tokens = self._due.get(tick)
        if tokens is None:
            tokens = self._due[tick] = []
            self.loop.call_at(tick * TICK_S, self._expire_tick, tick)
        tokens.append(token)

    def _expire_tick(self, tick: int) -> None:
        waiting = self.waiting
        for token in self._due.pop(tick, ()):
            future = waiting.get(token)
            if isinstance(future, asyncio.Future):
                _expire(future)

    def request(self, subject: str, data: bytes, headers: dict[str, str],
                timeout_s: float) -> Msg:
        """One request/reply from a thread other than the loop's."""
        token, future = self._queue(subject, data, headers)
        try:
            try:
                msg = future.result(timeout_s)
            except concurrent.futures.TimeoutError:
                from nats.errors import TimeoutError as NatsTimeout

                raise NatsTimeout from None
        finally:
            self.waiting.pop(token, None)
        return _answered(msg)

    async def arequest_from(self, subject: str, data: bytes, headers: dict[str, str],
                            timeout_s: float) -> Msg:
        """One request/reply awaited on another loop than the link's: queued as a
        thread's is, the answer's future awaited (no task on the link's loop)."""
        token, future = self._queue(subject, data, headers)
        try:
            try:
                msg = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
            except asyncio.TimeoutError:
                from nats.errors import TimeoutError as NatsTimeout

                raise NatsTimeout from None
        finally:
            self.waiting.pop(token, None)
        return _answered(msg)

    def _queue(self, subject: str, data: bytes, headers: dict[str, str]
               ) -> tuple[str, concurrent.futures.Future[Msg]]:
        """Queue a request for the loop to publish: its token and the answer's future."""
        token = self._token()
        future: concurrent.futures.Future[Msg] = concurrent.futures.Future()
        self.waiting[token] = future
        with self._lock:
            self._outbox.append((subject, data, headers, self.prefix + token, future))
            wake, self._sending = not self._sending, True
        if wake:
            try:
                self.loop.call_soon_threadsafe(self._start_sending)
            except RuntimeError:  # the loop is closed: so is the connection
                with self._lock:
                    self._outbox.clear()
                    self._sending = False
                self.waiting.pop(token, None)
                raise
        return token, future

    def _start_sending(self) -> None:
        self.loop.create_task(self._send())

    async def _send(self) -> None:
        while True:
            with self._lock:
                if not self._outbox:
                    self._sending = False
                    return
                subject, data, headers, inbox, future = self._outbox.popleft()
            if inbox[len(self.prefix):] not in self.waiting:
                continue  # its thread gave up while it was queued
            try:
                await self._publish(subject, data, headers, inbox)
            except Exception as exc:  # closed, draining, too large: the thread raises it
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    future.set_exception(exc)


class NatsLink:
    """`with NatsLink(url) as link: link.request(subject, data, headers, timeout_s)`."""

    def __init__(self, url: str, *, name: str = "wasmext", connect_timeout_s: float = 5.0,
                 auth: NatsAuth | None = None) -> None:
        self.url, self.name = url, name
        self._timeout_s, self._auth = connect_timeout_s, auth
        self._forked = ""  # in a forked child: "renew" (a threaded link) or "refuse"
        self._renewing = threading.Lock()
        self._start()
        renew_in_children(self)

    def _start(self) -> None:
        """Start the loop's thread, connect and subscribe to the replies."""
        url, timeout_s, auth = self.url, self._timeout_s, self._auth
        self._loop = new_event_loop()  # uvloop where installed (wasmext.loops)
        self._thread: threading.Thread | None = threading.Thread(
            target=self._loop.run_forever, name=f"nats:{self.name}", daemon=True)
        self._thread.start()
        try:
            self._client: Client = self._run(connect(url, self.name, timeout_s, auth=auth),
                                             2 * timeout_s + 1)
            self._replies = _Replies(self._client, self._loop)
            self._run(self._replies.start(), timeout_s)
        except Exception as exc:
            self._stop_loop()
            if isinstance(exc, NatsUnavailable):
                raise
            raise NatsUnavailable(f"cannot connect to {redact_url(url)}: "
                                  f"{clean(redact(str(exc), url, auth))}") from None

    def _after_fork(self) -> None:
        """In a forked child: the loop's thread and the connection are the parent's. A
        threaded link starts anew on first use (not in the fork's hook); a link on the
        parent's loop is refused."""
        if self._loop.is_closed():
            return
        _ABANDONED.extend((self._loop, self._thread, self._client, self._replies))
        self._forked = "refuse" if self._thread is None else "renew"
        self._renewing = threading.Lock()

    def _own(self) -> None:
        """Before any use in a forked child: the child's own loop and connection, or
        NatsLinkForked for a link opened on the parent's event loop."""
        if self._forked == "refuse":
            raise NatsLinkForked(f"NATS link {self.name} to {redact_url(self.url)} was opened"
                                 " on an event loop of the process this one was forked from:"
                                 " open a link in the forked process (NatsLink.open after"
                                 " the fork)")
        with self._renewing:
            if self._forked == "renew":
                self._start()
                self._forked = ""

    @property
    def client(self) -> Client:
        """The nats-py client (in a forked child, the child's own)."""
        if self._forked:
            self._own()
        return self._client

    @classmethod
    async def open(cls, url: str, *, name: str = "wasmext", connect_timeout_s: float = 5.0,
                   auth: NatsAuth | None = None) -> NatsLink:
        """A link on the running loop, with no thread of its own (close it with `aclose`)."""
        link = cls.__new__(cls)
        link.url, link.name = url, name
        link._timeout_s, link._auth = connect_timeout_s, auth
        link._forked, link._renewing = "", threading.Lock()
        link._loop = asyncio.get_running_loop()
        link._thread = None
        link._client = await connect(url, name, connect_timeout_s, auth=auth)
        link._replies = _Replies(link._client, link._loop)
        await link._replies.start()
        renew_in_children(link)
        return link

    @property
    def reply_prefix(self) -> str:
        """The subject prefix this link's answers come back to (`<inbox prefix>.<nuid>.`)."""
        if self._forked:
            self._own()
        return self._replies.prefix

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coro` on the link's loop and wait for it (at most `timeout_s`)."""
        if self._forked:
            self._own_or_close(coro)
        if self._on_own_loop():
            coro.close()
            raise RuntimeError("a blocking call on the NATS link's own event loop would never "
                               "return: await arequest (Router.arun) there")
        return self._run(coro, timeout_s)

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s} s") from None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the link's loop; the caller waits on (or cancels) the future."""
        if self._forked:
            self._own_or_close(coro)
        if self._on_own_loop():
            coro.close()
            raise RuntimeError("a blocking call on the NATS link's own event loop would never "
                               "return")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def request(self, subject: str, data: bytes, headers: dict[str, str],
                timeout_s: float) -> Msg:
        """One request/reply; raises nats' TimeoutError or NoRespondersError, or OSError."""
        if self._forked:
            self._own()
        if self._on_own_loop():
            raise RuntimeError("a blocking call on the NATS link's own event loop would never "
                               "return: await arequest (Router.arun) there")
        return self._replies.request(subject, data, headers, timeout_s)

    def arequest(self, subject: str, data: bytes, headers: dict[str, str],
                 timeout_s: float) -> Coroutine[Any, Any, Msg]:
        """`request` awaited: directly on the link's own loop, else queued to it as a
        thread's request is (no coroutine run there, no thread blocked). A plain function
        handing back the coroutine to await: one frame less on every resume."""
        if self._forked:
            self._own()
        if asyncio._get_running_loop() is self._loop:  # the check `_on_own_loop` makes
            return self._replies.arequest(subject, data, headers, timeout_s)
        return self._replies.arequest_from(subject, data, headers, timeout_s)

    def _own_or_close(self, coro: Coroutine[Any, Any, Any]) -> None:
        """`_own`, closing `coro` when refused or not connected (never awaited, it
        would warn)."""
        try:
            self._own()
        except BaseException:
            coro.close()
            raise

    def _on_own_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    async def aclose(self) -> None:
        """Drain the connection of a link made by `open` (on its loop)."""
        if self._forked:  # the parent's connection: not the child's to drain
            return
        with contextlib.suppress(Exception):
            await self._client.drain()

    def __repr__(self) -> str:
        return f"NatsLink({redact_url(self.url)!r}, name={self.name!r})"

    def close(self) -> None:
        """Drain the connection and stop its loop (a link made by `open`: `aclose`)."""
        if self._forked == "renew":  # never used in this forked child: nothing of its own
            self._loop = asyncio.new_event_loop()
            self._loop.close()  # used after close, as a closed link of the parent's is
            self._forked = ""
            return
        if self._loop.is_closed() or self._thread is None:
            return
        with contextlib.suppress(Exception):  # closing: the server may already be gone
            self._run(self._client.drain(), 5.0)
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._thread is None:  # the caller's loop: not ours to stop
            return
        stop_in_thread(self._loop, self._thread)

    def __enter__(self) -> NatsLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
