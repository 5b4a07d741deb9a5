"""A TCP proxy between NATS clients and a real nats-server that forwards the server's
stream to each client cut where a test says: every byte alone, random sizes, at each
command's end, or inside a message's control line, header block, payload or closing
CRLF, with a pause after each part, so that the client's reads end where the test
wants them to (`FastClient._read_in_callback` parses a read in the socket's callback).
The client's own stream goes up unchanged. A test may also stall a direction (the server
then sees a consumer that does not read) or drop every connection (a server gone)."""

from __future__ import annotations

import contextlib
import random
import re
import select
import socket
import threading
import time
from dataclasses import dataclass, field

# A message's control line: `MSG subject sid [reply] size` or `HMSG ... hsize size`.
_MSG_LINE = re.compile(rb"(H?)MSG [^\r\n]*?(?:(\d+) )?(\d+)\r\n")


@dataclass
class Plan:
    """Where to cut the server's stream: `mode` is one of "whole" (as read), "bytes"
    (every `size` bytes), "random" (1..`size` bytes, from `seed`), "boundaries" (at
    each command's end), "line", "header", "payload", "crlf" (inside each message's
    control line, header block, payload, or between its closing CR and LF); `pause_s`
    after each part sent."""

    mode: str = "whole"
    size: int = 1
    seed: int = 0
    pause_s: float = 0.0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)


class _Scanner:
    """Follows the server's stream across reads: the offsets (in the stream) where a
    command ends and where each message's parts begin, for the plans that cut there."""

    def __init__(self) -> None:
        self.pending = b""  # an unfinished control line
        self.offset = 0  # the stream offset of `pending`'s first byte
        self.skip = 0  # bytes of a message body still to pass

    def cuts(self, data: bytes, mode: str) -> list[int]:
        """Offsets within `data` to cut at under `mode`."""
        base = self.offset
        buf = self.pending + data
        out: list[int] = []
        at = 0
        while at < len(buf):
            if self.skip:
                step = min(self.skip, len(buf) - at)
                self.skip -= step
                at += step
                if not self.skip and mode == "boundaries":
                    out.append(at)
                continue
            end = buf.find(b"\r\n", at)
            if end < 0:
                break
            line = buf[at:end + 2]
            found = _MSG_LINE.fullmatch(line)
            if found is None:
                if mode == "boundaries":
                    out.append(end + 2)
                at = end + 2
                continue
            hsize = int(found.group(2)) if found.group(1) and found.group(2) else 0
            size = int(found.group(3))
            body = end + 2
            if mode == "line":
                out.append(at + len(line) // 2)
            elif mode == "header" and hsize > 1:
                out.append(body + hsize // 2)
            elif mode == "payload" and size - hsize > 1:
                out.append(body + hsize + (size - hsize) // 2)
            elif mode == "crlf":
                out.append(body + size + 1)
            at = body
            self.skip = size + 2
        self.pending = buf[at:] if not self.skip else b""
        consumed = len(buf) - len(self.pending)
        self.offset = base + consumed
        shift = len(buf) - len(data)  # `pending` came before `data`
        return sorted({c - shift for c in out if 0 < c - shift < len(data)})


class ChunkingProxy:
    """Listens on loopback; each client gets its own connection to `upstream` (host,
    port). `plan` may be replaced at any time; `stall_down` holds the server's stream
    (nothing read from the server meanwhile); `drop()` closes every connection."""

    def __init__(self, upstream: tuple[str, int], plan: Plan | None = None) -> None:
        self.upstream = upstream
        self.plan = plan or Plan()
        self.stall_down = threading.Event()
        self.forwarded = 0  # bytes passed to clients
        self.connections = 0  # connections accepted, ever
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="chunking-proxy").start()

    @property
    def url(self) -> str:
        """The nats:// url clients connect to."""
        return f"nats://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, 5)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
            with self._lock:
                self._socks += [client, server]
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, server, None),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, _Scanner()),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, scanner: _Scanner | None) -> None:
        try:
            while True:
                if scanner is not None and self._stalled_until_hangup(src):
                    break
                data = src.recv(65536)
                if not data:
                    break
                if scanner is None:
                    dst.sendall(data)
                    continue
                self._forward(data, dst, scanner)
        except (OSError, ValueError):  # ValueError: a socket `drop` closed meanwhile
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _stalled_until_hangup(self, src: socket.socket) -> bool:
        """Wait while `stall_down` holds, reading nothing from the server; True when the
        server hung up meanwhile (a slow consumer's connection closed: the client must
        see that, or it waits on a connection that is gone)."""
        if not self.stall_down.is_set():
            return False
        poller = select.poll()
        poller.register(src, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
        while self.stall_down.is_set() and not self._closed:
            if poller.poll(10):
                return True
        return False

    def _forward(self, data: bytes, dst: socket.socket, scanner: _Scanner) -> None:
        plan = self.plan
        mode = plan.mode
        if mode == "bytes":
            cuts = list(range(plan.size, len(data), plan.size))
            scanner.cuts(data, "whole")
        elif mode == "random":
            cuts, at = [], 0
            while True:
                at += plan.rng.randint(1, max(1, plan.size))
                if at >= len(data):
                    break
                cuts.append(at)
            scanner.cuts(data, "whole")
        else:
            cuts = scanner.cuts(data, mode)
        begin = 0
        for cut in [*cuts, len(data)]:
            dst.sendall(data[begin:cut])
            self.forwarded += cut - begin
            begin = cut
            if plan.pause_s:
                time.sleep(plan.pause_s)

    def drop(self) -> None:
        """Close every connection (each client sees its server gone)."""
        with self._lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._closed = True
        self._listener.close()
        self.drop()


def proxy_for(nats_url: str, plan: Plan | None = None) -> ChunkingProxy:
    """A `ChunkingProxy` in front of the server at `nats_url`."""
    host, port = nats_url.rsplit("/", 1)[-1].rsplit(":", 1)
    return ChunkingProxy((host, int(port)), plan)


