"""Real loopback HTTP servers for the http.fetch and llm.complete tests.

`Loopback` serves a few routes on 127.0.0.1 (or ::1) from a thread: plain
answers, an echo of the request headers, redirects, a response that claims or
streams a gigabyte, a slow answer, answers that drip their headers or body one
byte at a time, and an OpenAI-compatible chat-completions endpoint whose
behaviour the test sets (its delay, drip, text and the usage it reports, true
or not). Every request is recorded.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

GIGABYTE = 1 << 30


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], family: int) -> None:
        self.address_family = family
        self.seen: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.slow_s = 5.0
        self.completion: dict[str, Any] = {"text": "hello from the model", "delay_s": 0.0,
                                           "usage": (12, 5), "drip_s": 0.0}
        self.drip_s = 0.05  # the pause between two dripped bytes
        self.sent_bytes = 0
        self.connections = 0  # TCP connections accepted (a kept-alive one counts once)
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        accepted = super().get_request()
        self.connections += 1
        return accepted


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, declared: bool) -> None:
        self.send_response(200)
        if declared:
            self.send_header("Content-Length", str(GIGABYTE))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(GIGABYTE // len(chunk)):
                self.wfile.write(chunk)
                self.server.sent_bytes += len(chunk)
        except OSError:
            pass  # the client hung up at its cap: what the test wants
        self.close_connection = True

    def _drip(self, data: bytes, pause_s: float) -> None:
        """Send `data` one byte at a time (a server that holds its client)."""
        try:
            for i in range(len(data)):
                if self.server.stop.wait(pause_s):
                    break
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                self.server.sent_bytes += 1
        except OSError:
            pass  # the client hung up: what the test wants
        self.close_connection = True

    def _drip_answer(self, body: bytes, pause_s: float, headers_too: bool,
                     content_type: str = "text/plain") -> None:
        padding = f"X-Padding: {'p' * 300}\r\n" if headers_too else ""  # 20 s of drip
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{padding}"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        if headers_too:
            self._drip(head + body, pause_s)
        else:
            self.wfile.write(head)
            self.wfile.flush()
            self._drip(body, pause_s)

    def do_GET(self) -> None:
        self._route(b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self._route(self.rfile.read(length))

    def _route(self, body: bytes) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.seen.append({"path": parts.path, "headers": headers, "body": body})
        if parts.path == "/hello":
            self._answer(200, b"hi", {"X-Answer": "yes", "Set-Cookie": "session=1"})
        elif parts.path == "/echo":
            echoed = json.dumps(dict(self.headers.items())).encode()
            self._answer(200, echoed, {"X-Echo-Auth": self.headers.get("Authorization", "")})
        elif parts.path == "/redirect":
            self._answer(302, b"", {"Location": query["to"]})
        elif parts.path in ("/echo-token", "/leak-redirect"):  # a server that repeats a secret
            token = self.headers.get("Authorization", "").split()[-1:] or [""]
            word = token[0]
            if parts.path == "/leak-redirect":
                self._answer(302, b"", {"Location": f"/hello?t={quote(word, safe='')}"})
            else:
                forms = [word, quote(word, safe=""), base64.b64encode(word.encode()).decode()]
                self._answer(200, " ".join(forms).encode(), {"X-Token": word})
        elif parts.path == "/gigabyte":
            self._stream(declared=True)
        elif parts.path == "/gigabyte-undeclared":
            self._stream(declared=False)
        elif parts.path == "/slow":
            self.server.stop.wait(self.server.slow_s)
            self._answer(200, b"late")
        elif parts.path == "/drip":
            self._drip_answer(b"d" * 400, self.server.drip_s, headers_too=False)
        elif parts.path == "/drip-headers":
            self._drip_answer(b"late", self.server.drip_s, headers_too=True)
        elif parts.path == "/v1/chat/completions":
            self._complete(json.loads(body or b"{}"))
        else:
            self._answer(404, b"no such route")

    def _complete(self, request: dict[str, Any]) -> None:
        plan = self.server.completion
        if plan["delay_s"]:
            self.server.stop.wait(plan["delay_s"])
        if plan.get("raw") is not None:  # a hostile model server's exact bytes
            self._answer(200, plan["raw"], {"Content-Type": "application/json"})
            return
        doc: dict[str, Any] = {
            "id": "cmpl-1", "object": "chat.completion", "model": request.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": plan["text"]}}]}
        usage = plan["usage"]
        if isinstance(usage, tuple):
            prompt, completion = usage
            doc["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                            "total_tokens": prompt + completion}
        elif usage is not None:  # whatever a lying server says, as it says it
            doc["usage"] = usage
        raw = json.dumps(doc).encode()
        if plan["drip_s"]:
            self._drip_answer(raw, plan["drip_s"], headers_too=plan.get("drip_headers", False),
                              content_type="application/json")
        else:
            self._answer(200, raw, {"Content-Type": "application/json"})


class Loopback:
    def __init__(self, server: _Server) -> None:
        self.server = server
        host, port = server.server_address[:2]
        self.host = str(host)
        self.port = int(port)

    def url(self, path: str, host: str | None = None) -> str:
        name = host or self.host
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{self.port}{path}"

    @property
    def seen(self) -> list[dict[str, Any]]:
        return self.server.seen


@contextmanager
def loopback(host: str = "127.0.0.1", port: int = 0) -> Iterator[Loopback]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = _Server((host, port), family)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield Loopback(server)
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def elapsed(since: float) -> float:
    return time.monotonic() - since
