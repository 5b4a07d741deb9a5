"""The `http.fetch` op: HTTP to granted hosts only, inside the call's deadline.

Grants: `http` enables the op; `http:<host pattern>` names the hosts
(`services.http.guard` checks names and addresses). Each hop (the request and
every redirect) is checked again, resolved once (or its name's answer of
the last few seconds reused: `guard.AddressCache`) and sent to the checked
address, through a keep-alive client kept for exactly that checked address
(`services.http.pool`), so that no pooled connection made for one host or
address carries a request for another. Bodies are read in pieces and abandoned at the
cap; every byte, headers included, is read by the call's deadline
(`services.http.deadline` shuts the connection down when it passes, so a
server dripping bytes cannot hold the call). Headers the host injects
(`inject_header`: a plugin's sensitive setting sent to one scheme, port and
host pattern; https unless the operator names http) are added last, never
returned, and their values, in the forms a server may echo them (the whole
value, each long word of it such as a bearer token, percent- and
base64-encoded), are cut out of the answer's body, headers and `url` and of
every error; a redirect whose Location carries one is not followed.
"""

from __future__ import annotations

import base64
import fnmatch
import re
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus, urljoin

from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.services.http.deadline import bounded, passed
from wasmext.services.http.guard import (
    AddressCache,
    Refused,
    Target,
    ascii_pattern,
    resolve_target,
)
from wasmext.services.http.pool import ClientPool

if TYPE_CHECKING:
    import httpx2

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
    """Bounds of http.fetch: request and response bytes, headers, redirects."""

    max_request_bytes: int = 65_536
    max_response_bytes: int = 262_144
    max_headers: int = 64
    max_redirects: int = 5
    # Kept free before the hook call's deadline so the guest can still answer
    # after a fetch that answered `timeout`.
    answer_margin_ms: int = 20
    # How long a name's DNS answer is reused (0: every hop asks getaddrinfo). Every
    # request still checks the addresses against its grants (`guard.AddressCache`).
    dns_cache_ms: int = 5000


@dataclass(frozen=True)
class _Injection:
    plugin_id: str
    host_pattern: str
    header: str
    setting: str
    scheme: str
    port: int


MIN_SECRET_WORD = 8  # a shorter word of a header value ("Bearer") is not the secret


def _decoded(word: str) -> list[str]:
    """What a base64 word (the credentials of "Basic <word>") stands for, and its parts."""
    try:
        text = base64.b64decode(word, validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return []
    if not text.isprintable():
        return []
    return [text, *(p for p in text.split(":") if len(p) >= MIN_SECRET_WORD)]


def secret_forms(values: list[str]) -> list[str]:
    """The forms in which a server may echo injected values, longest first: each value,
    each of its words of MIN_SECRET_WORD characters or more (the token of "Bearer
    <token>"; the user:password a "Basic" word encodes, and its long parts), and each of
    those percent-encoded and base64-encoded."""
    words = {w for v in values for w in (v, *v.split()) if len(w) >= MIN_SECRET_WORD or w == v}
    words |= {d for w in list(words) if len(w) >= MIN_SECRET_WORD for d in _decoded(w)}
    forms = set()
    for word in words:
        if not word:
            continue
        raw = word.encode()
        forms.update({word, quote(word, safe=""), quote_plus(word),
                      base64.b64encode(raw).decode().rstrip("="),
                      base64.urlsafe_b64encode(raw).decode().rstrip("=")})
    return sorted(forms, key=len, reverse=True)


def redact(text: str, forms: list[str]) -> str:
    """`text` with every form of an injected secret replaced by the redaction marker."""
    for form in forms:
        text = text.replace(form, REDACTED.decode())
    return text


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
        self._clients = ClientPool()
        self.addresses = AddressCache(self.limits.dns_cache_ms / 1000)
        weakref.finalize(self, self._clients.close)

    def close(self) -> None:
        """Close the kept-alive connections."""
        self._clients.close()

    def inject_header(self, plugin_id: str, host_pattern: str, header: str,
                      setting: str, *, scheme: str = "https", port: int | None = None) -> None:
        """Send the plugin's sensitive `setting` as `header` to `scheme`://`host_pattern`
        :`port` only (the scheme's default port unless named): https unless the operator
        says http, since a secret over plain http is readable on the way."""
        if scheme not in ("https", "http"):
            raise ValueError(f"scheme must be https or http, not {scheme!r}")
        self._injections.append(_Injection(plugin_id, ascii_pattern(host_pattern.lower()),
                                           header.lower(), setting, scheme,
                                           port or (443 if scheme == "https" else 80)))

    def install(self, services: HostServices) -> None:
        """Register the http.fetch host call."""
        services.register("http.fetch", self.fetch)

    def _injected(self, ctx: CallContext, target: Target) -> dict[str, str]:
        out = {}
        for inj in self._injections:
            if inj.plugin_id == ctx.plugin_id and inj.scheme == target.scheme \
                    and inj.port == target.port \
                    and fnmatch.fnmatchcase(target.host, inj.host_pattern) \
                    and inj.setting in ctx.sensitive and inj.setting in ctx.settings:
                out[inj.header] = str(ctx.settings[inj.setting])
        return out

    def _all_secrets(self, ctx: CallContext) -> list[str]:
        """Every value this plugin's injections could send: redacted wherever they appear,
        whichever hop sent them (a server may pass one on to the next)."""
        return [str(ctx.settings[inj.setting]) for inj in self._injections
                if inj.plugin_id == ctx.plugin_id and inj.setting in ctx.sensitive
                and inj.setting in ctx.settings]

    def fetch(self, ctx: CallContext, req: dict[str, Any]) -> dict[str, Any]:
        """Host call http.fetch: fetch a URL the plugin's net: grants allow, bounded."""
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
        forms = secret_forms(self._all_secrets(ctx))
        try:
            answer = self._hops(ctx, url, method.upper(), headers, body, deadline, forms)
            answer["url"] = redact(answer["url"], forms)
            return answer
        except Refused as exc:
            raise OpError(exc.code, redact(f"http.fetch {url[:200]}: {exc.message}",
                                           forms)) from None
        finally:
            # Waiting on the network is the host's time, not the plugin's host-call
            # budget; it still counts against the call's deadline.
            ctx.waited_seconds += time.perf_counter() - started

    def _hops(self, ctx: CallContext, url: str, method: str, headers: dict[str, str],
              body: bytes, deadline: float, forms: list[str]) -> dict[str, Any]:
        for _hop in range(self.limits.max_redirects + 1):
            target = resolve_target(url, ctx.grants, deadline, self.addresses,
                                    ctx.plugin_id)
            secrets = self._injected(ctx, target)
            answer = self._send(target, method, {**headers, **secrets}, body, deadline, forms)
            location = answer.pop("location", None)
            if location is None:
                answer["url"] = url
                return answer
            if redact(location, forms) != location:  # it would carry the secret elsewhere
                raise Refused("denied", "a redirect's Location carries an injected secret; "
                              "not followed")
            url = urljoin(url, location)
            status = answer["status"]
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", b""
        raise Refused("limit", f"more than {self.limits.max_redirects} redirects")

    def _send(self, target: Target, method: str, headers: dict[str, str], body: bytes,
              deadline: float, forms: list[str]) -> dict[str, Any]:
        import httpx2  # with the first request, not the host (`http.transport`)

        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused("timeout", "the call's deadline passed")
        if "host" in headers or "accept-encoding" in headers:  # an injection's: ours win
            headers = {k: v for k, v in headers.items() if k not in ("host", "accept-encoding")}
        try:
            # The Host header and the identity encoding are the client's own: its key
            # (scheme, host, port, address) fixes them, and a guest cannot set either.
            client = self._clients.client(
                (target.scheme, target.host, target.port, target.address),
                {"host": target.host_header, "accept-encoding": "identity"})
            with bounded(deadline) as extensions:
                if target.scheme == "https":
                    extensions["sni_hostname"] = target.host
                request = client.build_request(method, target.connect_url,
                                               headers=headers or None,
                                               content=body or None, extensions=extensions)
                response = client.send(request, stream=True)
                try:
                    return self._read(response, deadline, forms)
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
              forms: list[str]) -> dict[str, Any]:
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
        for form in forms:
            data = data.replace(form.encode(), REDACTED)
        out_headers = {k: redact(v, forms) for k, v in out_headers.items()}
        return {"status": response.status_code, "headers": out_headers, "body": data}
