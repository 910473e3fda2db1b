"""The bearer token every request to ``torchport mcp --http`` must carry.

Binding to loopback and checking Host and Origin stop a web page, not a program: any
process of any local user can reach 127.0.0.1, and the tools read the repository (``run``
prints what a program reads) and write it (``apply``). So the HTTP server answers 401
to a request without ``Authorization: Bearer TOKEN``, in an ASGI layer around the SDK's
app, before the request reaches the MCP session or any tool. The comparison takes the
same time whatever the token given (``hmac.compare_digest``).

The token is the user's ``TORCHPORT_MCP_TOKEN``, else a fresh random one that the CLI
prints once on its own standard error. Either way it is taken out of ``os.environ``
before the server starts any process, so neither the MCP worker nor a sandboxed run
inherits it (the sandbox builds its environment from an allowlist anyway), and it is
never logged.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

TOKEN_VARIABLE = "TORCHPORT_MCP_TOKEN"
MIN_TOKEN_CHARS = 16  # a given token shorter than this is refused: it could be guessed
SCHEME = b"bearer"  # RFC 6750; the scheme is case-insensitive (RFC 9110 11.1)

UNAUTHORIZED = {
    "code": -32001,
    "message": "unauthorized: torchport mcp --http needs the header 'Authorization: Bearer "
    "TOKEN' (the token the server printed when it started, or TORCHPORT_MCP_TOKEN's)",
}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TokenError(ValueError):
    """The token in TORCHPORT_MCP_TOKEN cannot be used (the message never quotes it)."""


def server_token(environ: MutableMapping[str, str] | None = None) -> tuple[str, bool]:
    """The token this server requires, and whether the user gave it: ``TORCHPORT_MCP_TOKEN``
    (removed from ``environ``, ``os.environ`` by default, so no child inherits it) or a
    new random one. Raises TokenError for a token too short or not a header value."""
    environ = os.environ if environ is None else environ
    given = environ.pop(TOKEN_VARIABLE, "")
    if not given:
        return secrets.token_urlsafe(32), False
    if len(given) < MIN_TOKEN_CHARS or not all("!" <= c <= "~" for c in given):
        raise TokenError(
            f"{TOKEN_VARIABLE}: must be at least {MIN_TOKEN_CHARS} visible ASCII characters "
            "with no spaces (it travels in an HTTP header); unset it for a random one"
        )
    return given, True


def _given_token(scope: Scope) -> bytes | None:
    """The token of the request's one ``Authorization: Bearer`` header, else None."""
    values = [v for k, v in scope.get("headers") or () if k.lower() == b"authorization"]
    if len(values) != 1:
        return None
    scheme, _, token = values[0].strip().partition(b" ")
    return token.strip() if scheme.lower() == SCHEME else None


class RequireToken:
    """ASGI middleware: an HTTP request without the server's token gets 401 and goes no
    further; lifespan events (the SDK's session manager starting) pass through."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = _given_token(scope)
        # constant time in the token's value (a wrong length tells only the length)
        if given is not None and hmac.compare_digest(given, self._token):
            await self.app(scope, receive, send)
            return
        await _unauthorized(scope, send)


async def _unauthorized(scope: Scope, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    # a JSON-RPC error, so an MCP client shows the reason instead of a bare status
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": UNAUTHORIZED}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b'Bearer realm="torchport mcp"'),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
