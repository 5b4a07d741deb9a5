"""A hostile model server against llm.complete's keep-alive transport (red team).

llm.complete sends straight through its transport, without an httpx Client: nothing
of a Client's redirect, cookie or auth machinery runs. These pin what that must still
mean against a server that answers whatever it likes: a redirect is an error (the
address it names is never contacted), a cookie it sets never comes back, a body past
the cap or dripped past the deadline ends as a named ModelError in time, bytes sent
past an answer are never read as the next request's answer (on http.fetch's shared
pool: never as another plugin's), and neither the URL's password nor the API key
appears in any error or request line but its own header; a compressed answer is never
inflated. A healthy plugin answers afterwards.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
import wasmtime

from wasmext import ModelError, Plugin
from wasmext.services.llm.client import ChatRequest, OpenAIClient
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, guest_wat, make_host

PASSWORD = "pw-Z9xQ7redteam"
API_KEY = "sk-redteam-4f1c0ffee"
ANSWER = (b'{"choices":[{"message":{"content":"fine"},"finish_reason":"stop"}],'
          b'"usage":{"prompt_tokens":1,"completion_tokens":1}}')


def _response(body: bytes = ANSWER, status: str = "200 OK", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


class RawServer:
    """A loopback HTTP/1.1 server whose every connection `script` handles by hand;
    `requests` keeps each request's head, as it arrived."""

    def __init__(self, script: Callable[[socket.socket, RawServer], None]) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def read_request(self, conn: socket.socket) -> bytes:
        """One request (head and Content-Length body); its head is kept."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += conn.recv(65536)
        self.requests.append(head)
        return head

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            self.script(conn, self)

    def url(self) -> str:
        return f"http://user:{PASSWORD}@127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self._stop = True
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    made: list[RawServer] = []

    def make(script: Callable[[socket.socket, RawServer], None]) -> RawServer:
        made.append(RawServer(script))
        return made[-1]
    yield make
    for srv in made:
        srv.close()


def _ask(client: OpenAIClient, timeout_s: float = 2.0) -> Any:
    return client.chat(ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                   timeout_s=timeout_s))


def _refused(client: OpenAIClient, within_s: float, timeout_s: float = 2.0) -> str:
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        _ask(client, timeout_s)
    assert time.monotonic() - started < within_s
    text = str(info.value)
    assert PASSWORD not in text and API_KEY not in text
    return text


def test_a_redirect_is_an_error_and_its_target_is_never_contacted(
        serve: Callable[..., RawServer], healthy: Plugin) -> None:
    target = serve(lambda conn, srv: (srv.read_request(conn), conn.sendall(_response())))

    def redirect(conn: socket.socket, srv: RawServer) -> None:
        while srv.read_request(conn):
            conn.sendall(_response(b"", "302 Found",
                                   f"Location: http://127.0.0.1:{target.port}/v1/x\r\n"))
    client = OpenAIClient(serve(redirect).url(), api_key=API_KEY)
    try:
        for _ in range(2):  # and again over the kept-alive connection
            assert "HTTP 302" in _refused(client, 5)
    finally:
        client.close()
    time.sleep(0.1)
    assert target.requests == []
    assert healthy.call("test").value == "alive"


def test_a_cookie_the_server_sets_never_comes_back(serve: Callable[..., RawServer],
                                                   healthy: Plugin) -> None:
    def cookies(conn: socket.socket, srv: RawServer) -> None:
        while srv.read_request(conn):
            conn.sendall(_response(extra="Set-Cookie: track=me; Path=/\r\n"))
    srv = serve(cookies)
    client = OpenAIClient(srv.url(), api_key=API_KEY)
    try:
        assert [_ask(client).text for _ in range(3)] == ["fine"] * 3
    finally:
        client.close()
    assert len(srv.requests) == 3
    assert not any(b"cookie" in head.lower() for head in srv.requests)
    # The key goes as the Authorization header (the URL's password does not ride along).
    assert all(f"Bearer {API_KEY}".encode() in head for head in srv.requests)
    assert not any(PASSWORD.encode() in head for head in srv.requests)
    assert healthy.call("test").value == "alive"


def test_a_body_past_the_cap_ends_early_whatever_its_length_says(
        serve: Callable[..., RawServer], healthy: Plugin) -> None:
    def flood(conn: socket.socket, srv: RawServer) -> None:
        srv.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n")
        block = b"[" * 65536
        for _ in range(1000):  # 64 MiB if nobody stops reading
            conn.sendall(block)
    client = OpenAIClient(serve(flood).url(), api_key=API_KEY, max_answer_bytes=1 << 20)
    try:
        assert "answer over 1048576 bytes" in _refused(client, 10, timeout_s=5.0)
    finally:
        client.close()
    assert healthy.call("test").value == "alive"


def test_a_dripped_answer_ends_at_the_deadline(serve: Callable[..., RawServer],
                                               healthy: Plugin) -> None:
    def drip(conn: socket.socket, srv: RawServer) -> None:
        srv.read_request(conn)
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(ANSWER)}\r\n\r\n".encode())
        for byte in ANSWER:
            conn.sendall(bytes([byte]))
            time.sleep(0.05)
    client = OpenAIClient(serve(drip).url(), api_key=API_KEY)
    try:
        assert "no answer within 0.5 s" in _refused(client, 3, timeout_s=0.5)
    finally:
        client.close()
    assert healthy.call("test").value == "alive"


def test_a_reset_mid_answer_names_neither_password_nor_key(
        serve: Callable[..., RawServer], healthy: Plugin) -> None:
    def cut(conn: socket.socket, srv: RawServer) -> None:
        srv.read_request(conn)
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(ANSWER)}\r\n\r\n".encode()
                     + ANSWER[:10])
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client = OpenAIClient(serve(cut).url(), api_key=API_KEY)
    try:
        text = _refused(client, 5)
    finally:
        client.close()
    assert "127.0.0.1" in text  # the endpoint is named, its credentials are not
    assert healthy.call("test").value == "alive"


def _planting(planted: bytes) -> Callable[[socket.socket, RawServer], None]:
    """A server that glues `planted` to its first answer, unasked."""
    calls: list[int] = []

    def script(conn: socket.socket, srv: RawServer) -> None:
        while srv.read_request(conn):
            calls.append(1)
            conn.sendall(_response() + (planted if len(calls) == 1 else b""))
    return script


def test_bytes_after_an_answer_never_answer_the_next_request(
        serve: Callable[..., RawServer], healthy: Plugin) -> None:
    srv = serve(_planting(_response(ANSWER.replace(b'"fine"', b'"planted"'))))
    client = OpenAIClient(srv.url(), api_key=API_KEY)
    try:
        first = _ask(client).text
        time.sleep(0.05)
        later = [_ask(client).text for _ in range(2)]
    finally:
        client.close()
    assert (first, later) == ("fine", ["fine", "fine"])
    assert len(srv.requests) == 3  # each was asked of the server, none taken from the glue
    assert healthy.call("test").value == "alive"


def _fetcher(url: str) -> bytes:
    raw = msgpack.packb({"op": "http.fetch", "url": url})
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                    imports=HOST_CALL_IMPORT, data=raw, memory_pages=4,
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 1})
    return bytes(wasmtime.wat2wasm(wat))


def test_a_plugins_server_cannot_plant_the_answer_to_another_plugins_fetch(
        serve: Callable[..., RawServer], healthy: Plugin) -> None:
    planted = b"planted for whoever asks next"
    srv = serve(_planting(_response(planted)))
    url = f"http://127.0.0.1:{srv.port}/data"
    limits = {"timeout_ms": 5000, "host_call_timeout_ms": 5000}
    with make_host() as host:
        first = host.add(_fetcher(url), plugin_id="planter", grants={"http", "http:127.0.0.1"},
                         limits=limits)
        other = host.add(_fetcher(url), plugin_id="victim", grants={"http", "http:127.0.0.1"},
                         limits=limits)
        started = time.monotonic()
        assert first.call("test").value["body"] == ANSWER
        time.sleep(0.05)
        assert other.call("test").value["body"] == ANSWER  # the server's answer to it
        assert time.monotonic() - started < 10
        assert len(srv.requests) == 2
    assert healthy.call("test").value == "alive"


def test_a_compressed_answer_is_never_inflated(serve: Callable[..., RawServer],
                                               healthy: Plugin) -> None:
    bomb = gzip.compress(b"[" * (64 << 20))  # 64 MiB of brackets in about 64 KiB

    def inflate_me(conn: socket.socket, srv: RawServer) -> None:
        while srv.read_request(conn):
            conn.sendall(_response(bomb, extra="Content-Encoding: gzip\r\n"))
    srv = serve(inflate_me)
    client = OpenAIClient(srv.url(), api_key=API_KEY, max_answer_bytes=1 << 20)
    try:
        text = _refused(client, 5)
    finally:
        client.close()
    assert "not a chat completion" in text  # read as the bytes sent, not inflated
    assert b"accept-encoding: identity" in srv.requests[0].lower()
    assert healthy.call("test").value == "alive"
