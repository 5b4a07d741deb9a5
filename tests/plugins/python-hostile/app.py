"""Hooks that each try to get past one bound of the component sandbox."""

import os
import socket
import time
from typing import Any

from wasmext_guest import Plugin, export, hook


class Hostile(Plugin):
    name = "python-hostile"

    @hook("echo")
    def echo(self, data: Any) -> Any:
        return data

    @hook("spin")
    def spin(self, data: Any) -> Any:
        n = 0
        while True:  # only fuel or the deadline ends this
            n += 1

    @hook("sleep")
    def sleep(self, seconds: float) -> Any:
        time.sleep(seconds)  # WASI p2: monotonic-clock subscribe-duration, then poll
        return "slept"

    @hook("bomb")
    def bomb(self, data: Any) -> Any:
        hoard = []
        while True:  # only the memory cap ends this
            hoard.append(bytearray(1 << 20))

    @hook("read_file")
    def read_file(self, path: str) -> Any:
        with open(path, "rb") as f:
            return f.read(100)

    @hook("write_file")
    def write_file(self, data: dict[str, Any]) -> Any:
        with open(data["path"], "w") as f:
            return f.write(data["text"])

    @hook("list_dir")
    def list_dir(self, path: str) -> Any:
        return os.listdir(path)

    @hook("env")
    def env(self, data: Any) -> Any:
        return dict(os.environ)

    @hook("connect")
    def connect(self, address: list[Any]) -> Any:
        with socket.create_connection((address[0], address[1]), timeout=0.5) as s:
            return s.recv(10)

    @hook("raise")
    def raise_(self, text: str) -> Any:
        raise RuntimeError(text)

    @hook("recurse")
    def recurse(self, depth: int) -> Any:
        return self.recurse(depth + 1)

    @hook("nest")
    def nest(self, depth: int) -> Any:
        value: Any = []
        for _ in range(depth):
            value = [value]
        return value

    @hook("huge")
    def huge(self, size: int) -> Any:
        return "x" * size


WitWorld = export(Hostile())
