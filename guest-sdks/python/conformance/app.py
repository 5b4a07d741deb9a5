"""Conformance plugin: each hook exercises one part of the SDK so that the
cross-SDK test suite can compare every SDK's behaviour (see tests/sdks)."""

from typing import Any

from wasmext_guest import (
    UNCHANGED,
    Fail,
    HostError,
    Plugin,
    Stop,
    agents_request,
    agents_send,
    config,
    emit,
    export,
    hook,
    http_fetch,
    llm_complete,
    log,
    progress,
    prompt_get,
    prompt_list,
    request,
    resource_list,
    resource_read,
    state_get,
    state_set,
    tool_register,
)
from wasmext_guest.msgpack import pack, unpack


class Conformance(Plugin):
    name = "python-conformance"
    version = "0.1.0"

    @hook("echo")
    def echo(self, data: Any) -> Any:
        # The call's own reader and writer carry every value: MessagePack's every width.
        return data

    @hook("repack")
    def repack(self, data: Any) -> Any:
        # Through the SDK's writer and reader once more, inside the handler.
        return unpack(pack(data))

    @hook("config")
    def config(self, key: Any) -> Any:
        if not isinstance(key, str):
            raise Fail("invalid", "config expects a string key")
        return config(key)  # a HostError (not_found, denied) is answered as is

    @hook("log")
    def log(self, text: Any) -> None:
        if not isinstance(text, str):
            raise Fail("invalid", "log expects a string")
        log(text)

    @hook("host")
    def host(self, req: Any) -> Any:
        if not isinstance(req, dict):
            raise Fail("invalid", "host expects a request map")
        return request(req)  # the host's whole answer, failures included

    # Minor 1, through the wrappers; each answers the host's whole answer map.
    @hook("fetch")
    def fetch(self, url: Any) -> Any:
        return _whole(lambda: http_fetch(str(url)))

    @hook("llm")
    def llm(self, prompt: Any) -> Any:
        return _whole(lambda: llm_complete(str(prompt), max_tokens=50))

    @hook("remember")
    def remember(self, key: Any) -> Any:
        def store_and_read() -> Any:
            state_set(str(key), f"v:{key}")
            return state_get(str(key))
        return _whole(store_and_read)

    @hook("announce")
    def announce(self, topic: Any) -> Any:
        return _whole(lambda: emit(str(topic), "hi"))

    @hook("turn")
    def turn(self, agent: Any) -> Any:
        return _whole(lambda: agents_request(str(agent), "ping"))

    @hook("step")
    def step(self, agent: Any) -> Any:
        return _whole(lambda: agents_send(str(agent), "ping"))

    @hook("mcp")
    def mcp(self, req: Any) -> Any:
        """The minor-1 MCP and progress wrappers, picked by the request's op."""
        if not isinstance(req, dict):
            raise Fail("invalid", "mcp expects a request map")
        wrappers = {
            "resource.list": lambda: resource_list(req["server"]),
            "resource.read": lambda: resource_read(req["server"], req["uri"]),
            "prompt.list": lambda: prompt_list(req["server"]),
            "prompt.get": lambda: prompt_get(req["server"], req["name"], req.get("args")),
            "progress": lambda: progress(req["progress"], req.get("total"),
                                         req.get("message")),
        }
        if req.get("op") not in wrappers:
            raise Fail("invalid", "mcp: an op of resource.*, prompt.* or progress")
        return _whole(wrappers[req["op"]])

    # Minor 2: a tool registered after load ({name, description?, input_schema?}),
    # served by on_tool as {tool, args}.
    @hook("register_tool")
    def register_tool(self, spec: Any) -> Any:
        if not isinstance(spec, dict):
            raise Fail("invalid", "register_tool expects {name, ...}")
        return _whole(lambda: tool_register(str(spec.get("name")), spec.get("description"),
                                            spec.get("input_schema")))

    @hook("on_tool")
    def on_tool(self, call: Any) -> Any:
        return {"tool": call.get("name"), "args": call.get("args")}

    @hook("fail")
    def fail(self, message: Any) -> None:
        if not isinstance(message, str):
            raise Fail("invalid", "fail expects a string message")
        raise Fail("failed", message)

    @hook("unchanged")
    def unchanged(self, data: Any) -> Any:
        return UNCHANGED

    @hook("stop")
    def stop(self, data: Any) -> Stop:
        return Stop(data)


def _whole(ask: Any) -> dict[str, Any]:
    try:
        return {"ok": True, "value": ask()}
    except HostError as err:
        return {"ok": False, "error": {"code": err.code, "message": err.message}}


WitWorld = export(Conformance())
