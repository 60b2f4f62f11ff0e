"""The optional API key: with ``API_KEY`` set, every route but ``/health`` needs the key.

A client sends ``Authorization: Bearer <key>``; anything else is answered ``401`` with a
``WWW-Authenticate: Bearer`` header before the request reaches a route. That covers the REST
routes, ``/admin/*``, ``/metrics``, ``/docs``, ``/openapi.json`` and MCP at ``/mcp`` alike.
``/health`` stays open so that load balancers and orchestrators can probe the server.

It is a pure ASGI middleware (no response buffering), so MCP's streamed answers pass through
untouched.
"""

from __future__ import annotations

import hmac

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/health"})


class ApiKeyMiddleware:
    """Refuses requests without ``Authorization: Bearer <api_key>``, except to ``open_paths``."""

    def __init__(
        self, app: ASGIApp, api_key: str, open_paths: frozenset[str] = OPEN_PATHS
    ) -> None:
        if not api_key:
            raise ValueError("api_key must not be empty")
        self.app = app
        self._key = api_key.encode()
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        problem = self._problem(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": problem})
            return
        challenge = 'Bearer realm="kernel-eval"'
        if "invalid" in problem:
            challenge += ', error="invalid_token"'
        response = JSONResponse(
            {"detail": problem}, status_code=401, headers={"WWW-Authenticate": challenge}
        )
        await response(scope, receive, send)

    def _problem(self, scope: Scope) -> str | None:
        """Why the request is refused, or None when it carries the key."""
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        if header is None:
            return "this server requires an API key: send 'Authorization: Bearer <key>'"
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return "the Authorization header must be 'Bearer <key>'"
        # Constant-time, so the key cannot be guessed byte by byte from response times.
        if not hmac.compare_digest(token.strip(), self._key):
            return "invalid API key"
        return None
