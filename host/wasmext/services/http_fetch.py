"""The `http.fetch` op: HTTP to granted hosts only, inside the call's deadline.

Grants: `http` enables the op; `http:<host pattern>` names the hosts
(`services.netguard` checks names and addresses). Each hop (the request and
every redirect) is checked again, resolved once and sent to the checked
address, with a fresh client so that no pooled connection made for one host
carries a request for another. Bodies are read in pieces and abandoned at the
cap; every byte, headers included, is read by the call's deadline
(`services.httpdeadline` shuts the connection down when it passes, so a
server dripping bytes cannot hold the call). Headers the host injects
(`inject_header`: a plugin's sensitive setting sent to hosts matching a
pattern) are added last, never returned, and their values are cut out of
whatever the server echoes back.
"""

from __future__ import annotations

import fnmatch
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import httpx2

from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.services.httpdeadline import bounded, passed, tls_context
from wasmext.services.netguard import Refused, Target, ascii_pattern, resolve_target

__all__ = ["HttpFetch", "HttpLimits"]

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Set by the host for every hop; a guest's value would only mislead the server.
HOST_OWNED = frozenset({"host", "content-length", "transfer-encoding", "connection",
                        "accept-encoding", "te", "upgrade", "proxy-authorization"})
DROPPED_ANSWER_HEADERS = frozenset({"set-cookie", "set-cookie2"})
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
# Visible ASCII, space and tab: what every HTTP/1.1 stack sends unchanged. Other
# bytes (obs-text, controls) would be re-encoded, refused or split by the client.
FIELD_VALUE = re.compile(r"^[\t\x20-\x7e]{0,8192}$")
REDACTED = b"[redacted]"


@dataclass(frozen=True)
class HttpLimits:
    max_request_bytes: int = 65_536
    max_response_bytes: int = 262_144
    max_headers: int = 64
    max_redirects: int = 5
    # Kept free before the hook call's deadline so the guest can still answer
    # after a fetch that answered `timeout`.
    answer_margin_ms: int = 20


@dataclass(frozen=True)
class _Injection:
    plugin_id: str
    host_pattern: str
    header: str
    setting: str


def _request_headers(raw: Any, limits: HttpLimits) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > limits.max_headers:
        raise OpError("invalid", f"'headers' must be a map of at most {limits.max_headers} "
                      "names to strings")
    out: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(value, str) or not TOKEN.match(name) or \
                not FIELD_VALUE.match(value):
            raise OpError("invalid", f"header {name[:64]!r} is not a valid name and value "
                          "(values are printable ASCII)")
        if name.lower() not in HOST_OWNED:
            out[name.lower()] = value
    return out


def _body(raw: Any, limits: HttpLimits) -> bytes:
    if raw is None:
        return b""
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if not isinstance(raw, bytes):
        raise OpError("invalid", "'body' must be bytes or a string")
    if len(raw) > limits.max_request_bytes:
        raise OpError("limit", f"request body of {len(raw)} bytes is over "
                      f"{limits.max_request_bytes}")
    return raw


class HttpFetch:
    """The http.fetch op of one Host."""

    def __init__(self, limits: HttpLimits | None = None) -> None:
        self.limits = limits or HttpLimits()
        self._injections: list[_Injection] = []

    def inject_header(self, plugin_id: str, host_pattern: str, header: str,
                      setting: str) -> None:
        """Send the plugin's sensitive `setting` as `header` to hosts matching the pattern."""
        self._injections.append(_Injection(plugin_id, ascii_pattern(host_pattern.lower()),
                                           header.lower(), setting))

    def install(self, services: HostServices) -> None:
        services.register("http.fetch", self.fetch)

    def _injected(self, ctx: CallContext, host: str) -> dict[str, str]:
        out = {}
        for inj in self._injections:
            if inj.plugin_id == ctx.plugin_id and fnmatch.fnmatchcase(host, inj.host_pattern) \
                    and inj.setting in ctx.sensitive and inj.setting in ctx.settings:
                out[inj.header] = str(ctx.settings[inj.setting])
        return out

    def fetch(self, ctx: CallContext, req: dict[str, Any]) -> dict[str, Any]:
        url = req.get("url")
        method = req.get("method", "GET")
        if not isinstance(url, str) or len(url) > 8192:
            raise OpError("invalid", "'url' must be a string of at most 8192 characters")
        if not isinstance(method, str) or method.upper() not in METHODS:
            raise OpError("invalid", f"'method' must be one of {', '.join(sorted(METHODS))}")
        headers = _request_headers(req.get("headers"), self.limits)
        body = _body(req.get("body"), self.limits)
        started = time.perf_counter()
        deadline = (ctx.deadline or time.monotonic() + 30.0) - self.limits.answer_margin_ms / 1000
        try:
            return self._hops(ctx, url, method.upper(), headers, body, deadline)
        except Refused as exc:
            raise OpError(exc.code, f"http.fetch {url[:200]}: {exc.message}") from None
        finally:
            # Waiting on the network is the host's time, not the plugin's host-call
            # budget; it still counts against the call's deadline.
            ctx.waited_seconds += time.perf_counter() - started

    def _hops(self, ctx: CallContext, url: str, method: str, headers: dict[str, str],
              body: bytes, deadline: float) -> dict[str, Any]:
        for _hop in range(self.limits.max_redirects + 1):
            target = resolve_target(url, ctx.grants, deadline)
            secrets = self._injected(ctx, target.host)
            answer = self._send(target, method, {**headers, **secrets}, body, deadline,
                                list(secrets.values()))
            location = answer.pop("location", None)
            if location is None:
                answer["url"] = url
                return answer
            url = urljoin(url, location)
            status = answer["status"]
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", b""
        raise Refused("limit", f"more than {self.limits.max_redirects} redirects")

    def _send(self, target: Target, method: str, headers: dict[str, str], body: bytes,
              deadline: float, secrets: list[str]) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused("timeout", "the call's deadline passed")
        headers = {**headers, "host": target.host_header, "accept-encoding": "identity"}
        try:
            with bounded(deadline) as extensions, \
                    httpx2.Client(trust_env=False, follow_redirects=False,
                                  verify=tls_context()) as client:
                if target.scheme == "https":
                    extensions["sni_hostname"] = target.host
                request = client.build_request(method, target.connect_url, headers=headers,
                                               content=body or None, extensions=extensions)
                response = client.send(request, stream=True)
                try:
                    return self._read(response, deadline, secrets)
                finally:
                    response.close()
        except httpx2.TimeoutException:
            raise Refused("timeout", f"{target.host} did not answer within the call's "
                          "deadline") from None
        except httpx2.TransportError as exc:
            if passed(deadline):  # the watchdog shut the connection at the deadline
                raise Refused("timeout", f"{target.host} did not answer within the call's "
                              "deadline") from None
            raise Refused("unavailable", f"{target.host}: {type(exc).__name__}") from None
        except UnicodeError:
            # Only an operator's injected value can get here (the guest's are checked);
            # the message names no value, it may be a secret.
            raise Refused("invalid", "a header value the host adds is not ASCII") from None

    def _read(self, response: httpx2.Response, deadline: float,
              secrets: list[str]) -> dict[str, Any]:
        cap = self.limits.max_response_bytes
        if response.is_redirect and "location" in response.headers:
            return {"status": response.status_code, "location": response.headers["location"]}
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise Refused("limit", f"the response declares {declared} bytes, over {cap}")
        chunks, total = [], 0
        for chunk in response.iter_raw(65536):
            total += len(chunk)
            if total > cap:
                raise Refused("limit", f"the response is over {cap} bytes")
            chunks.append(chunk)
            if passed(deadline):
                raise Refused("timeout", "the response ran past the call's deadline")
        if passed(deadline):  # the watchdog's shutdown reads as the end of an unframed body
            raise Refused("timeout", "the response ran past the call's deadline")
        data = b"".join(chunks)
        out_headers: dict[str, str] = {}
        for name, value in response.headers.multi_items():
            name = name.lower()
            if name not in DROPPED_ANSWER_HEADERS:
                out_headers[name] = f"{out_headers[name]}, {value}" if name in out_headers \
                    else value
        for secret in secrets:
            if secret:
                data = data.replace(secret.encode(), REDACTED)
                out_headers = {k: v.replace(secret, REDACTED.decode())
                               for k, v in out_headers.items()}
        return {"status": response.status_code, "headers": out_headers, "body": data}
