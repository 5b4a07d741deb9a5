"""MCP content blocks <-> the MessagePack shape plugins and the app see.

A tool result whose content is not only text reaches the app (and a plugin's
`tool.call`) as `{"content": [block, ...], "structured"?: {...}}`, and a plugin
returning that shape from `on_tool` is served as those MCP blocks. A block is
one of (binary as MessagePack bin / Python bytes, never base64):

    {"type": "text", "text": str}
    {"type": "image" | "audio", "data": bytes, "mime_type": str}
    {"type": "resource_link", "uri": str, "name": str,
     "mime_type"?: str, "description"?: str, "title"?: str}
    {"type": "resource", "uri": str, "mime_type"?: str, "text": str}   # or "blob": bytes

Blocks coming from a plugin are hostile: every name, URI and MIME type is
cleaned and bounded, unknown types and fields are refused (`ValueError`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as types

from wasmext.text import clean

__all__ = ["MAX_BLOCKS", "content_shape", "from_mcp", "to_mcp"]

MAX_BLOCKS = 256
_KEYS = {
    "text": ({"type", "text"}, set()),
    "image": ({"type", "data", "mime_type"}, set()),
    "audio": ({"type", "data", "mime_type"}, set()),
    "resource_link": ({"type", "uri", "name"}, {"mime_type", "description", "title"}),
    "resource": ({"type", "uri"}, {"mime_type", "text", "blob"}),
}


def content_shape(value: Any) -> bool:
    """Is `value` the `{"content": [...], "structured"?}` shape (rather than plain output)?"""
    return (isinstance(value, Mapping) and "content" in value
            and set(value) <= {"content", "structured"}
            and isinstance(value["content"], list)
            and all(isinstance(b, Mapping) and "type" in b for b in value["content"]))


def _b64decode(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"invalid base64 data: {exc}") from None


def from_mcp(blocks: Sequence[Any]) -> list[dict[str, Any]]:
    """SDK content blocks as plain maps (binary decoded); unknown kinds are skipped."""
    out: list[dict[str, Any]] = []
    for block in blocks[:MAX_BLOCKS]:
        if isinstance(block, types.TextContent):
            out.append({"type": "text", "text": block.text})
        elif isinstance(block, (types.ImageContent, types.AudioContent)):
            out.append({"type": block.type, "data": _b64decode(block.data),
                        "mime_type": block.mime_type})
        elif isinstance(block, types.ResourceLink):
            link: dict[str, Any] = {"type": "resource_link", "uri": str(block.uri),
                                    "name": block.name}
            for key in ("mime_type", "description", "title"):
                if getattr(block, key) is not None:
                    link[key] = getattr(block, key)
            out.append(link)
        elif isinstance(block, types.EmbeddedResource):
            out.append(resource_contents(block.resource))
    return out


def resource_contents(res: Any) -> dict[str, Any]:
    """A TextResourceContents / BlobResourceContents as an embedded `resource` block."""
    item: dict[str, Any] = {"type": "resource", "uri": str(res.uri)}
    if res.mime_type is not None:
        item["mime_type"] = res.mime_type
    if isinstance(res, types.BlobResourceContents):
        item["blob"] = _b64decode(res.blob)
    else:
        item["text"] = res.text
    return item


def _short(block: Mapping[str, Any], key: str, limit: int, where: str) -> str:
    value = block.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: '{key}' must be a non-empty string")
    return clean(value, limit)


def _binary(block: Mapping[str, Any], key: str, where: str) -> str:
    value = block.get(key)
    if not isinstance(value, (bytes, bytearray)):
        raise ValueError(f"{where}: '{key}' must be binary (MessagePack bin)")
    return base64.b64encode(bytes(value)).decode("ascii")


def _optional(block: Mapping[str, Any], key: str, limit: int, where: str) -> str | None:
    return _short(block, key, limit, where) if key in block else None


def to_mcp_resource(block: Mapping[str, Any], where: str
                    ) -> types.TextResourceContents | types.BlobResourceContents:
    """An MCP resource's contents from a content block (exactly one of text or blob)."""
    uri = _short(block, "uri", 2048, where)
    mime = _optional(block, "mime_type", 128, where)
    if ("text" in block) == ("blob" in block):
        raise ValueError(f"{where}: a resource has exactly one of 'text' or 'blob'")
    if "text" in block:
        if not isinstance(block["text"], str):
            raise ValueError(f"{where}: 'text' must be a string")
        return types.TextResourceContents(uri=uri, mime_type=mime, text=block["text"])
    return types.BlobResourceContents(uri=uri, mime_type=mime,
                                      blob=_binary(block, "blob", where))


def to_mcp(blocks: Sequence[Any], owner: str = "plugin") -> list[types.ContentBlock]:
    """Plugin-made blocks as SDK content blocks, or ValueError naming the first bad one."""
    if len(blocks) > MAX_BLOCKS:
        raise ValueError(f"{owner}: more than {MAX_BLOCKS} content blocks")
    out: list[types.ContentBlock] = []
    for i, block in enumerate(blocks):
        where = f"{owner}: content[{i}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if not isinstance(kind, str) or kind not in _KEYS:
            raise ValueError(f"{where}: unknown type {clean(repr(kind), 40)}")
        required, optional = _KEYS[kind]
        extra = set(block) - required - optional
        if extra or not required <= set(block):
            raise ValueError(f"{where}: a {kind} block has the fields {sorted(required)}"
                             + (f" (optional {sorted(optional)})" if optional else ""))
        if kind == "text":
            if not isinstance(block["text"], str):
                raise ValueError(f"{where}: 'text' must be a string")
            out.append(types.TextContent(text=block["text"]))
        elif kind in ("image", "audio"):
            cls = types.ImageContent if kind == "image" else types.AudioContent
            out.append(cls(data=_binary(block, "data", where),
                           mime_type=_short(block, "mime_type", 128, where)))
        elif kind == "resource_link":
            out.append(types.ResourceLink(
                uri=_short(block, "uri", 2048, where), name=_short(block, "name", 256, where),
                mime_type=_optional(block, "mime_type", 128, where),
                description=_optional(block, "description", 1024, where),
                title=_optional(block, "title", 256, where)))
        else:
            out.append(types.EmbeddedResource(resource=to_mcp_resource(block, where)))
    return out
