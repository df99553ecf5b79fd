"""Who may talk to the inspector: the Host header, the token, and headers on every answer.

A page served on loopback is still reachable from any web page the browser opens (DNS
rebinding points a hostile name at 127.0.0.1), so the ``Host`` header must name the
address the server was bound to, or a loopback name. Bound anywhere else, the server
requires a token on every request: the ``Authorization: Bearer`` header, or the cookie
that opening any page once with ``?token=...`` sets (``HttpOnly``, ``SameSite=Strict``).
A form post must come from the inspector's own pages (``Origin`` / ``Sec-Fetch-Site``).
Plain ASGI: no framework needed, so it is tested as it runs.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from chatkeep.errors import ConfigError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "chatkeep_inspect"
TOKEN_ENV = "CHATKEEP_INSPECT_TOKEN"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
     b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def require_token(host: str, token: str | None) -> None:
    """Refuse to serve beyond this machine without a token: ``ConfigError`` when ``host``
    is not loopback (an address, a name or a wildcard such as ``0.0.0.0``) and ``token``
    is empty. ``create_app`` and ``chatkeep inspect`` both ask it."""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"binding {host or 'every interface'} exposes the store beyond this machine: "
            f"pass a token (--token, or {TOKEN_ENV}); every request must then carry it")


def allowed_hosts(bind_host: str) -> frozenset[str] | None:
    """The host names a request may carry for a server bound to ``bind_host``: loopback
    names, and the bound address itself; ``None`` (any) when bound to every interface,
    where the token is the guard."""
    name = bind_host.strip("[]").lower()
    if name in WILDCARDS:
        return None
    return LOOPBACK_NAMES | {name}


def host_name(header: str) -> str:
    """The name part of a ``Host`` header (``[::1]:8765`` -> ``::1``)."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers", [])}


def _cookie(header: bytes, name: str) -> str | None:
    for part in header.decode("latin-1").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _same(token: str, candidate: str | None) -> bool:
    return candidate is not None and hmac.compare_digest(token.encode(), candidate.encode())


class AccessGuard:
    """ASGI middleware: refuses a foreign ``Host`` (400), a missing or wrong token (401),
    a cross-site form post (403) and any method but GET, HEAD and POST (405); adds the
    security headers to every answer."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str] | None,
                 token: str | None) -> None:
        self.app = app
        self.hosts = hosts
        self.token = token or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get(b"host", b"").decode("latin-1")
        if self.hosts is not None and host_name(host) not in self.hosts:
            await _plain(send, 400, "Invalid Host header: the inspector answers to "
                         "127.0.0.1 / localhost (or the address it was bound to)")
            return
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD", "POST"):
            await _plain(send, 405, "The inspector is read-only")
            return
        if self.token is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if _same(self.token, query.get("token")) and method == "GET":
                await self._set_cookie(scope, query, send)
                return
            bearer = headers.get(b"authorization", b"").decode("latin-1")
            given = bearer[7:] if bearer.lower().startswith("bearer ") else None
            cookie = _cookie(headers.get(b"cookie", b""), COOKIE)
            if not (_same(self.token, given) or _same(self.token, cookie)):
                await _plain(send, 401, "A token is required: open the inspector's address "
                             "with ?token=... once (it is printed when the server starts)")
                return
        if method == "POST" and not _same_origin(headers, host):
            await _plain(send, 403, "Cross-site form posts are refused")
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _set_cookie(self, scope: Scope, query: dict[str, str], send: Send) -> None:
        rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
        location = scope.get("root_path", "") + scope.get("path", "/") + (
            f"?{rest}" if rest else "")
        assert self.token is not None
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", location.encode("latin-1")),
            (b"set-cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; "
                            "Path=/".encode("latin-1")),
            (b"content-length", b"0"), *SECURITY_HEADERS]})
        await send({"type": "http.response.body", "body": b""})


def _same_origin(headers: dict[bytes, bytes], host: str) -> bool:
    site = headers.get(b"sec-fetch-site")
    if site is not None and site not in (b"same-origin", b"none"):
        return False
    origin = headers.get(b"origin")
    if origin is None or origin == b"null":
        return origin is None
    netloc = origin.decode("latin-1").split("://", 1)[-1]
    return netloc.lower() == host.lower()


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})
