"""Hostile registries on loopback, for what a real one will not do on request: a server
that accepts and never answers, and one that answers a chosen manifest and then streams
its layer without end, drips it, stalls midway, or redirects it to plain http off
loopback (or serves it, behind a Basic login, for the credential tests)."""

from __future__ import annotations

import base64
import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from wasmext.lifecycle.oci import MANIFEST_MEDIA_TYPE


@contextmanager
def stalling_server() -> Iterator[int]:
    """A loopback port that accepts connections and never sends a byte; yields the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.manifest = b"{}"
        self.blob_mode = "endless"
        self.manifest_headers: dict[str, str] = {}
        self.blob = b""  # what the "serve" mode answers
        self.login: str | None = None  # "user:password": Basic auth required
        self.token_login: str | None = None  # "user:password" for a Bearer token at /token
        self.authorizations: list[str] = []  # the Authorization headers seen
        self.redirect_to = ""  # where the "elsewhere" mode sends a layer request
        self.sent = 0
        self.stop = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on outcomes, not on the access log."""

    def do_GET(self) -> None:
        """/v2/, the chosen manifest, and a layer that misbehaves as asked."""
        given = self.headers.get("Authorization", "")
        self.server.authorizations.append(given)
        if self.server.token_login is not None and not self._token_granted(given):
            return
        if self.server.login is not None and \
                given != "Basic " + base64.b64encode(self.server.login.encode()).decode():
            self._answer(b'{"errors": [{"code": "UNAUTHORIZED", "message": "leaky text"}]}',
                         "application/json", {"Www-Authenticate": 'Basic realm="fake"'},
                         status=401)
        elif self.path == "/v2/":
            self._answer(b"{}", "application/json")
        elif "/manifests/" in self.path:
            digest = "sha256:" + hashlib.sha256(self.server.manifest).hexdigest()
            self._answer(self.server.manifest, MANIFEST_MEDIA_TYPE,
                         {"Docker-Content-Digest": digest, **self.server.manifest_headers})
        elif self.path == "/endless":
            self._blob_endless()
        elif "/blobs/" in self.path:
            getattr(self, f"_blob_{self.server.blob_mode}")()
        else:
            self._answer(b"{}", "application/json", status=404)

    def _token_granted(self, given: str) -> bool:
        """The Docker token protocol: /token trades a Basic login for a Bearer token,
        which every other path requires."""
        basic = "Basic " + base64.b64encode(str(self.server.token_login).encode()).decode()
        if self.path.startswith("/token"):
            if given == basic:
                self._answer(b'{"token": "t0k-granted"}', "application/json")
            else:
                self._answer(b"{}", "application/json", status=401)
            return False
        if given == "Bearer t0k-granted":
            return True
        realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self._answer(b'{"errors": []}', "application/json",
                     {"Www-Authenticate": f'Bearer realm="{realm}",service="fake"'}, status=401)
        return False

    def _answer(self, body: bytes, kind: str, headers: dict[str, str] | None = None,
                status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _blob_serve(self) -> None:
        self._answer(self.server.blob, "application/octet-stream")

    def _blob_endless(self) -> None:
        """Chunked, no Content-Length, never ending: only the client's cap stops it."""
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"\0" * 65536
        try:
            while not self.server.stop.is_set():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.server.sent += len(chunk)
        except OSError:
            return

    def _blob_drip(self) -> None:
        """Headers at once, then one byte every 200 ms: each read is quick, the whole slow."""
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(1000):
                if self.server.stop.is_set():
                    return
                self.wfile.write(b"x")
                self.wfile.flush()
                self.server.sent += 1
                time.sleep(0.2)
        except OSError:
            return

    def _blob_stall(self) -> None:
        """Headers and ten bytes at once, then nothing until the test ends."""
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"x" * 10)
        self.wfile.flush()
        self.server.sent += 10
        self.server.stop.wait()

    def _blob_redirect_endless(self) -> None:
        """A redirect whose own body never ends (a client reads it before following)."""
        self.send_response(302)
        self.send_header("Location", "/endless")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"\0" * 65536
        try:
            while not self.server.stop.is_set():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.server.sent += len(chunk)
        except OSError:
            return

    def _blob_elsewhere(self) -> None:
        """To another server (a CDN, or a host the registry wants the login sent to)."""
        self.send_response(307)
        self.send_header("Location", self.server.redirect_to)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _blob_redirect(self) -> None:
        """To plain http on a documentation address (never routed)."""
        self.send_response(307)
        self.send_header("Location", "http://192.0.2.1/blob")
        self.send_header("Content-Length", "0")
        self.end_headers()


@contextmanager
def crafted_registry() -> Iterator[_Server]:
    """A loopback registry whose manifest and layer behaviour the test sets."""
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
