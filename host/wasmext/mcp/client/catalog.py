"""Configured servers' resources, resource templates and prompts, for the app and for
plugins, followed like their tools.

    resources = list_resources(host.mcp, "docs")        # [{uri, name, mime_type?, ...}]
    templates = list_resource_templates(host.mcp, "docs")  # [{uri_template, name, ...}]
    blocks = read_resource(host.mcp, "docs", uri)       # [resource block] (see `content`)
    prompts = list_prompts(host.mcp, "docs")            # [{name, description?, arguments}]
    got = get_prompt(host.mcp, "docs", "review", {"code": "..."})  # {description?, messages}
    host.mcp.catalog.subscribe(lambda server, kind: ...)  # after a re-list that changed it

Plain maps in the MessagePack shape of `wasmext.mcp.content` (binary as bytes);
the plugin ops `resource.list|read` and `prompt.list|get` answer the same.

A server that advertises `resources.listChanged` (or `prompts.listChanged`) says
when its list changes, so the list it gave is kept and handed out again until
`notifications/resources/list_changed` (or `.../prompts/...`) arrives; then it
is listed again and every subscriber hears `(server, kind)` when the new list
differs from the last one seen. A server that does not advertise it is listed
on each request (it could change unannounced). Everything listed is the
server's, so hostile: names, titles, descriptions and MIME types are cleaned,
an entry whose URI, URI template or prompt name is unsafe or too long is skipped.
Resource templates belong to the resources capability: the same notification
announces them, and a re-list of resources lists them too (a change of either
is a change of "resources").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from wasmext.mcp.content import MAX_BLOCKS, from_mcp, resource_contents
from wasmext.observe import tracing
from wasmext.text import DESCRIPTION_CAP, clean, clean_lines, has_unsafe

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

__all__ = ["KINDS", "TEMPLATES", "Connections", "UpstreamCatalog", "get_prompt", "list_kind",
           "list_prompts", "list_resource_templates", "list_resources", "list_tools",
           "read_resource", "shape_prompt", "shape_resource", "shape_template"]

T = TypeVar("T")

log = logging.getLogger("wasmext.mcp")

KINDS = ("resources", "prompts")
TEMPLATES = "templates"  # listed with "resources": same capability, same notification
MAX_LISTED = 1000
MAX_PAGES = 100
MAX_URI = 2048
Listener = Callable[[str, str], None]


class Requester(Protocol):
    """Runs a request on a server's connection (`connections.McpClients` does)."""

    def request(self, server: str, make: Callable[[ClientSession], Coroutine[Any, Any, T]]
                ) -> T:
        """Run a request built by `make` on the server's session and return its answer."""
        ...


class Connections(Requester, Protocol):
    """Connected servers and their followed lists (`connections.McpClients`)."""

    catalog: UpstreamCatalog


async def _paged(fetch: Callable[..., Awaitable[Any]], attr: str,
                 limit: int | None = None) -> list[Any]:
    from mcp_types import PaginatedRequestParams

    items: list[Any] = []
    page = await fetch()
    for _ in range(MAX_PAGES):  # a bounded number of pages
        items.extend(getattr(page, attr))
        if not page.next_cursor or (limit is not None and len(items) >= limit):
            break
        page = await fetch(params=PaginatedRequestParams(cursor=page.next_cursor))
    return items


async def list_tools(session: ClientSession) -> list[Any]:
    """The tools of a session, across pages, stopping past MAX_LISTED (the caller keeps
    that many: each costs a compiled schema and a registry entry)."""
    return await _paged(session.list_tools, "tools", MAX_LISTED + 1)


def _optional(item: Any, limits: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, limit in limits.items():
        value = getattr(item, key, None)
        if isinstance(value, str):
            out[key] = clean_lines(value, limit) if key == "description" else clean(value, limit)
    return out


def _safe(text: Any, limit: int) -> bool:
    return isinstance(text, str) and 0 < len(text) <= limit and not has_unsafe(text)


_RESOURCE_FIELDS = {"mime_type": 128, "description": DESCRIPTION_CAP, "title": 128}


def shape_resource(item: Any) -> dict[str, Any] | None:
    """One listed resource as a plain map, cleaned; None when its URI is unusable."""
    uri = str(getattr(item, "uri", ""))
    if not _safe(uri, MAX_URI):
        return None
    return {"uri": uri, "name": clean(str(getattr(item, "name", "") or uri), 128),
            **_optional(item, _RESOURCE_FIELDS)}


def shape_template(item: Any) -> dict[str, Any] | None:
    """One listed resource template as a plain map, cleaned; None when it is unusable."""
    template = getattr(item, "uri_template", None)
    if not _safe(template, MAX_URI):
        return None
    return {"uri_template": template,
            "name": clean(str(getattr(item, "name", "") or template), 128),
            **_optional(item, _RESOURCE_FIELDS)}


def shape_prompt(item: Any) -> dict[str, Any] | None:
    """One listed prompt as a plain map, cleaned; None when its name is unusable."""
    name = getattr(item, "name", None)
    if not _safe(name, 256):
        return None
    args = [{"name": clean(a.name, 64), "required": bool(a.required),
             **_optional(a, {"description": 512})}
            for a in (getattr(item, "arguments", None) or [])[:64]
            if isinstance(getattr(a, "name", None), str) and a.name]
    return {"name": name, **_optional(item, {"description": DESCRIPTION_CAP, "title": 128}),
            "arguments": args}


async def _fetch(session: ClientSession, kind: str) -> list[dict[str, Any]]:
    if kind == "resources":
        shaped = [shape_resource(r) for r in await _paged(session.list_resources, "resources",
                                                          MAX_LISTED)]
    elif kind == TEMPLATES:
        shaped = [shape_template(t) for t in await _paged(
            session.list_resource_templates, "resource_templates", MAX_LISTED)]
    else:
        shaped = [shape_prompt(p) for p in await _paged(session.list_prompts, "prompts",
                                                        MAX_LISTED)]
    return [item for item in shaped if item is not None][:MAX_LISTED]


def list_kind(message: Any) -> str | None:
    """"resources" or "prompts" for their list_changed notification, else None."""
    from mcp_types import PromptListChangedNotification, ResourceListChangedNotification

    if isinstance(message, ResourceListChangedNotification):
        return "resources"
    if isinstance(message, PromptListChangedNotification):
        return "prompts"
    return None


async def _nothing() -> None:
    return None


def _base(kind: str) -> str:
    """The capability (and notification) a list belongs to."""
    return "resources" if kind == TEMPLATES else kind


@dataclass
class _Lists:  # one connection's
    session: Any
    follows: frozenset[str]  # the kinds the server announces changes of
    offers: frozenset[str]  # the kinds the server has at all
    timeout_s: float  # for one re-list (the server's connect_timeout_s, like its tools')
    cached: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    last: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    generation: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    changes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    busy: set[str] = field(default_factory=set)
    again: set[str] = field(default_factory=set)


class UpstreamCatalog:
    """The resource and prompt lists of `clients`' servers (see the module docstring)."""

    def __init__(self, clients: Requester) -> None:
        self.clients = clients
        self._lists: dict[str, _Lists] = {}
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(server, kind)` (on the MCP thread: be quick) after a followed
        change; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def adopt(self, server: str, session: ClientSession, timeout_s: float = 30.0) -> None:
        """A new connection: nothing cached yet; remember which lists it announces."""
        caps = session.server_capabilities
        follows = frozenset(kind for kind in KINDS if getattr(
            getattr(caps, kind, None), "list_changed", None) is True)
        offers = frozenset(kind for kind in KINDS if getattr(caps, kind, None) is not None)
        with self._lock:
            self._lists[server] = _Lists(session, follows, offers, timeout_s)

    def offering(self, kind: str) -> list[str]:
        """The connected servers that have `kind` at all."""
        with self._lock:
            return [name for name, lists in self._lists.items()
                    if _base(kind) in lists.offers]

    def changes(self, server: str, kind: str) -> int:
        """How many followed changes this connection's list has had (no I/O)."""
        with self._lock:
            lists = self._lists.get(server)
            return lists.changes[kind] if lists is not None else -1

    def forget(self, server: str) -> None:
        """Drop what is cached of a server."""
        with self._lock:
            self._lists.pop(server, None)

    def cached(self, server: str, kind: str) -> list[dict[str, Any]] | None:
        """A copy of the server's cached list of a kind, or None."""
        with self._lock:
            lists = self._lists.get(server)
            found = lists.cached.get(kind) if lists is not None else None
        return list(found) if found is not None else None

    def listed(self, server: str, kind: str) -> list[dict[str, Any]]:
        """Server's resources, templates or prompts (any thread; KeyError for an unknown
        server)."""
        with self._lock:
            lists = self._lists.get(server)
            if lists is not None and kind in lists.cached:
                return list(lists.cached[kind])
            generation = lists.generation[_base(kind)] if lists is not None else -1
        items = self.clients.request(server, lambda s: _fetch(s, kind))
        self._store(server, lists, kind, generation, items)
        return list(items)

    def _store(self, server: str, lists: _Lists | None, kind: str, generation: int,
               items: list[dict[str, Any]]) -> bool:
        """Keep `items` unless the connection or the list changed since they were asked."""
        with self._lock:
            if lists is None or self._lists.get(server) is not lists \
                    or lists.generation[_base(kind)] != generation:
                return False
            lists.last[kind] = items
            if _base(kind) in lists.follows:
                lists.cached[kind] = items
            return True

    def changed(self, server: str, kind: str, session: ClientSession
                ) -> Callable[[], Coroutine[Any, Any, None]]:
        """Follow a list_changed (on the MCP thread, in message order): drop the kept
        list now; answer the re-list to run in a task. While one runs this answers a
        no-op and that one lists once more: a burst costs at most two listings."""
        with self._lock:
            lists = self._lists.get(server)
            if lists is None or lists.session is not session:
                return _nothing
            lists.generation[kind] += 1  # a request-thread listing in flight is not kept
            lists.cached.pop(kind, None)
            if kind == "resources":
                lists.cached.pop(TEMPLATES, None)
        if kind in lists.busy:
            lists.again.add(kind)
            return _nothing
        lists.busy.add(kind)

        async def relist() -> None:
            try:
                while True:
                    lists.again.discard(kind)
                    await self._relist_once(server, lists, kind, session)
                    if kind not in lists.again:
                        break
            finally:
                lists.busy.discard(kind)
        return relist

    async def _relist_once(self, server: str, lists: _Lists, kind: str,
                           session: ClientSession) -> None:
        parts = [kind, TEMPLATES] if kind == "resources" else [kind]
        generation = lists.generation[kind]
        changed = False
        for part in parts:
            before = lists.last.get(part)
            try:
                with anyio.fail_after(lists.timeout_s):
                    items = await _fetch(session, part)
            except Exception as exc:
                if part != kind:  # a server without templates: its resources still count
                    log.debug("mcp server %s: no resource templates: %s", server, exc)
                    continue
                log.warning("mcp server %s: re-listing %s failed: %s", server, part,
                            clean(str(exc) or type(exc).__name__, 300))
                return
            if not self._store(server, lists, part, generation, items):
                return
            # Templates nobody listed yet are no news to anyone.
            changed = changed or (items != before and (part == kind or before is not None))
        if not changed:
            return
        with self._lock:
            lists.changes[kind] += 1
        log.info("mcp server %s: %s list changed", server, kind)
        for listener in list(self._listeners):
            try:
                listener(server, kind)
            except Exception:  # one subscriber must not stop the others
                log.exception("a %s list_changed subscriber failed", kind)


# -- for the app and the plugin ops ----------------------------------------------------

def list_resources(clients: Connections, server: str) -> list[dict[str, Any]]:
    """Kept while the server announces its list changes , else fresh."""
    return clients.catalog.listed(server, "resources")


def list_resource_templates(clients: Connections, server: str) -> list[dict[str, Any]]:
    """The server's URI templates (RFC 6570); a URI one fits is read with read_resource."""
    return clients.catalog.listed(server, TEMPLATES)


def trace_meta() -> dict[str, str] | None:
    """The current span's W3C trace context as a request's `_meta` (tracing on), made in
    the calling thread: the request itself runs on the connections' loop."""
    traced = tracing.ACTIVE
    if traced is None:
        return None
    meta: dict[str, str] = {}
    traced.inject(meta)
    return meta or None


def read_resource(clients: Connections, server: str, uri: str) -> list[dict[str, Any]]:
    """Read a resource of a server as content blocks."""
    meta = trace_meta()
    read = clients.request(server, lambda s: s.read_resource(
        uri, meta=meta))  # type: ignore[arg-type]
    return [resource_contents(c) for c in read.contents[:MAX_BLOCKS]]


def list_prompts(clients: Connections, server: str) -> list[dict[str, Any]]:
    """The server's prompts."""
    return clients.catalog.listed(server, "prompts")


def get_prompt(clients: Connections, server: str, name: str,
               args: dict[str, str] | None = None) -> dict[str, Any]:
    """Get a prompt of a server, rendered with the arguments."""
    meta = trace_meta()
    got = clients.request(server, lambda s: s.get_prompt(
        name, dict(args or {}), meta=meta))  # type: ignore[arg-type]
    out: dict[str, Any] = {"messages": [{"role": m.role, "content": from_mcp([m.content])[0]}
                                        for m in got.messages[:MAX_BLOCKS]
                                        if from_mcp([m.content])]}
    if got.description is not None:
        out["description"] = got.description
    return out
