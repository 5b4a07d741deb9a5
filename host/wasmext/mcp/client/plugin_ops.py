"""The ops `resource.list`, `resource.read`, `prompt.list`, `prompt.get` (ABI minor 1):
a plugin reaches configured MCP servers' resources and prompts.

They need the capability (`resources`, `prompts`) and pattern grants over
`<server>__<uri>` or `<server>__<prompt>` (fnmatch): `resources:docs__file:///*`,
`prompts:docs__*`. A list shows only what the grants cover; a read or a get of
anything else is `denied`, and so is a read of a URI a server could resolve to a
place the pattern does not name: one with a `.` or `..` segment, a backslash, an
encoded `/` or `\\`, or a control character, plain, percent-encoded or after NFKC (a grant
`resources:docs__file:///kb/*` matched `file:///kb/../etc/passwd`, and the
server was sent it). An unknown or unavailable server is `not_found` /
`unavailable`; the call's time is the calling plugin's.
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from wasmext.sandbox import calltree
from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.services.progress import progress
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.mcp.client.connections import McpClients

__all__ = ["confined", "granted", "install"]


def granted(grants: Iterable[str], kind: str, name: str) -> bool:
    """Does a `<kind>:<pattern>` grant (fnmatch) cover `name`?"""
    prefix = f"{kind}:"
    return any(g.startswith(prefix) and fnmatch.fnmatchcase(name, g[len(prefix):])
               for g in grants)


_DOT_SEGMENT = re.compile(r"(?:^|/)\.{1,2}(?:[/?#;]|$)")
_ENCODED_SEPARATOR = re.compile(r"%(?:2f|5c)", re.IGNORECASE)


def confined(uri: str) -> bool:
    """Is `uri` free of what lets a server resolve it outside a pattern that covers it
    (dot segments, backslashes, encoded separators, control characters), however often
    it is percent-decoded?"""
    text = uri
    for _ in range(4):
        # NFKC too: a server normalising "\uff0e\uff0e" or "\u2025" reads "..".
        folded = unicodedata.normalize("NFKC", text)
        if "\\" in folded or not text.isprintable() or _DOT_SEGMENT.search(folded) \
                or _ENCODED_SEPARATOR.search(folded) or folded.count("/") != text.count("/"):
            return False  # the last: a fullwidth or other solidus that folds to "/"
        decoded = unquote(text)
        if decoded == text:
            return True
        text = decoded
    return False  # still encoded four levels down: nothing a plain URI needs


def _text(req: dict[str, Any], key: str, limit: int = 2048) -> str:
    value = req.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise OpError("invalid", f"'{key}' must be a non-empty string (at most {limit})")
    return value


def install(services: HostServices, clients: Callable[[], McpClients | None]) -> None:
    """The MCP ops of ABI minor 1: these four and `progress` (wasmext.services.progress)."""
    services.register("progress", progress)

    def run(server: str, fn: Callable[[], Any]) -> Any:
        if clients() is None:
            raise OpError("unavailable", "no MCP servers are connected")
        try:
            return fn()
        except KeyError:
            raise OpError("not_found", f"no mcp server {clean(server, 64)!r}") from None
        except calltree.OutOfTime as exc:
            raise OpError("limit", str(exc)) from None
        except (RuntimeError, TimeoutError) as exc:
            raise OpError("unavailable", clean(str(exc))) from None
        except Exception as exc:  # the server's own error answer
            raise OpError("failed", clean(f"mcp server {server}: {exc}")) from None

    def resource_list(ctx: CallContext, req: dict[str, Any]) -> Any:
        from wasmext.mcp.client.catalog import list_resources  # the SDK loads when used

        server = _text(req, "server", 64)
        listed = run(server, lambda: list_resources(_c(), server))
        return [r for r in listed if granted(ctx.grants, "resources", f"{server}__{r['uri']}")]

    def resource_read(ctx: CallContext, req: dict[str, Any]) -> Any:
        from wasmext.mcp.client.catalog import read_resource

        server, uri = _text(req, "server", 64), _text(req, "uri")
        if not confined(uri):
            raise OpError("denied", f"plugin {ctx.plugin_id} may not read {clean(uri, 200)!r} "
                                    f"of {server}: a dot segment, backslash, encoded separator "
                                    "or control character could lead outside its grant")
        if not granted(ctx.grants, "resources", f"{server}__{uri}"):
            raise OpError("denied", f"plugin {ctx.plugin_id} may not read {clean(uri, 200)!r} "
                                    f"of {server}")
        return run(server, lambda: read_resource(_c(), server, uri))

    def prompt_list(ctx: CallContext, req: dict[str, Any]) -> Any:
        from wasmext.mcp.client.catalog import list_prompts

        server = _text(req, "server", 64)
        listed = run(server, lambda: list_prompts(_c(), server))
        return [p for p in listed if granted(ctx.grants, "prompts", f"{server}__{p['name']}")]

    def prompt_get(ctx: CallContext, req: dict[str, Any]) -> Any:
        from wasmext.mcp.client.catalog import get_prompt

        server, name = _text(req, "server", 64), _text(req, "name", 256)
        args = req.get("args", {})
        if not isinstance(args, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in args.items()):
            raise OpError("invalid", "'args' must map strings to strings")
        if not granted(ctx.grants, "prompts", f"{server}__{name}"):
            raise OpError("denied", f"plugin {ctx.plugin_id} may not get prompt "
                                    f"{clean(name, 80)!r} of {server}")
        return run(server, lambda: get_prompt(_c(), server, name, args))

    def _c() -> McpClients:
        found = clients()
        assert found is not None
        return found

    services.register("resource.list", resource_list)
    services.register("resource.read", resource_read)
    services.register("prompt.list", prompt_list)
    services.register("prompt.get", prompt_get)
