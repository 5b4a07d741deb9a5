"""Conformance plugin: each hook exercises one part of the SDK so that the
cross-SDK test suite can compare every SDK's behaviour (see tests/sdks)."""

from typing import Any

from wasmext_guest import UNCHANGED, Fail, Plugin, Stop, config, export, hook, log, request
from wasmext_guest.msgpack import pack, unpack


class Conformance(Plugin):
    name = "python-conformance"
    version = "0.1.0"

    @hook("echo")
    def echo(self, data: Any) -> Any:
        # Through the writer and the reader (not a copy): every width round-trips.
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


WitWorld = export(Conformance())
