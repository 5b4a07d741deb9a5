"""Layer 2, ABI minors 1 and 2 (abi/SPEC.md 4.3.1, 4.5 and 4.6): HTTP, the host's model,
agents, progress, configured MCP servers' resources and prompts, and tools registered
at runtime.

Each function sends one op and returns its value, raising `HostError` with the
ABI code when the host says no. A host that announced a minor below an op's at
registration does not have it: the SDK answers `unsupported` itself,
without asking it (SPEC 3.1).
"""

from __future__ import annotations

from typing import Any

from wasmext_guest.host import HostError, call

__all__ = ["ABI_MINOR", "agents_request", "agents_send", "host_minor", "http_fetch",
           "llm_complete", "progress", "prompt_get", "prompt_list", "resource_list",
           "resource_read", "tool_register"]

ABI_MINOR = 2  # the minor this SDK is built against (its registration says so)
_host = {"minor": 0}


def note_registration(request: dict[str, Any]) -> None:
    """Remember the host's minor from the registration request (the SDK calls it)."""
    abi = request.get("abi")
    minor = abi.get("minor") if isinstance(abi, dict) else None
    _host["minor"] = minor if type(minor) is int and minor >= 0 else 0


def host_minor() -> int:
    """The ABI minor the host announced at registration (0 before it)."""
    return _host["minor"]


def _op(op: str, since: int, **args: Any) -> Any:
    if _host["minor"] < since:
        raise HostError("unsupported", f"{op} needs ABI minor {since}; the host has "
                                       f"minor {_host['minor']}")
    return call(op, **{k: v for k, v in args.items() if v is not None})


def http_fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None,
               body: bytes | None = None) -> dict[str, Any]:
    """`http.fetch` (grants `http` and `http:<host pattern>`): {status, headers, body, url}."""
    return dict(_op("http.fetch", 1, url=url, method=method, headers=headers, body=body))


def llm_complete(prompt: str | None = None, *, messages: list[dict[str, str]] | None = None,
                 system: str | None = None, model: str | None = None,
                 max_tokens: int | None = None,
                 temperature: float | None = None, json_mode: bool = False) -> dict[str, Any]:
    """`llm.complete` (grant `llm`): a prompt (with an optional system message) or whole
    `messages`; {text, finish_reason, model, usage: {input, output}, cost}. `json_mode`
    asks the model for a JSON answer (its response_format)."""
    if messages is None:
        messages = ([{"role": "system", "content": system}] if system is not None else [])
        messages.append({"role": "user", "content": prompt or ""})
    return dict(_op("llm.complete", 1, messages=messages, model=model,
                    max_tokens=max_tokens, temperature=temperature,
                    json_mode=True if json_mode else None))


def agents_request(agent: str, input: Any, timeout_ms: int | None = None) -> Any:
    """`agents.request` (grants `agents`, `agents:<pattern>`; turn and step middleware
    only): the agent's answer."""
    return _op("agents.request", 1, agent=agent, input=input, timeout_ms=timeout_ms)


def agents_send(agent: str, input: Any) -> None:
    """`agents.send`: hand the agent `input` without waiting for an answer."""
    _op("agents.send", 1, agent=agent, input=input)


def progress(done: float, total: float | None = None, message: str | None = None) -> bool:
    """`progress` of the tool call in hand (on_tool): True when it was passed on."""
    answer = _op("progress", 1, progress=done, total=total, message=message)
    return bool(answer.get("delivered")) if isinstance(answer, dict) else False


def resource_list(server: str) -> list[dict[str, Any]]:
    """`resource.list` (grants `resources`, `resources:<pattern>`): [{uri, name, ...}]."""
    return list(_op("resource.list", 1, server=server))


def resource_read(server: str, uri: str) -> list[dict[str, Any]]:
    """`resource.read`: the resource's content blocks."""
    return list(_op("resource.read", 1, server=server, uri=uri))


def prompt_list(server: str) -> list[dict[str, Any]]:
    """`prompt.list` (grants `prompts`, `prompts:<pattern>`): [{name, description?, ...}]."""
    return list(_op("prompt.list", 1, server=server))


def prompt_get(server: str, name: str, args: dict[str, str] | None = None) -> dict[str, Any]:
    """`prompt.get`: {description?, messages}."""
    return dict(_op("prompt.get", 1, server=server, name=name, args=args))


def tool_register(name: str, description: str | None = None,
                  input_schema: dict[str, Any] | None = None,
                  output_schema: dict[str, Any] | None = None,
                  title: str | None = None) -> dict[str, Any]:
    """`tool.register` (ABI minor 2): add or replace one of this plugin's tools after load,
    served by its `on_tool` hook; {name: "<plugin>__<name>", replaced}. A broken name or
    schema raises HostError `invalid`, a cap (tools per plugin, schema size) `limit`."""
    return dict(_op("tool.register", 2, name=name, description=description,
                    input_schema=input_schema, output_schema=output_schema, title=title))
