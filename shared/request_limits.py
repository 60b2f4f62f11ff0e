"""How much of a request the server reads, and how much of it an error echoes back.

- :class:`BodySizeLimitMiddleware` refuses a body larger than ``MAX_REQUEST_BYTES`` with ``413``:
  at once when its ``Content-Length`` says so, else as soon as the bytes received pass the
  limit (a chunked body has no length), so an oversized body is never held in memory whole.
- :func:`excerpt` shortens a value that an invalid-request answer quotes back (FastAPI's
  ``input``): a long string to its start and its length, a large list or object to a summary.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_REQUEST_BYTES_VAR = "MAX_REQUEST_BYTES"
# Characters of a request's value that an error quotes back.
EXCERPT_CHARS = 200


class RequestBodyTooLarge(HTTPException):
    """The body passed the limit while it was being read.

    An HTTPException, so that FastAPI, reading the body for a route, passes it on as it is
    instead of turning it into "There was an error parsing the body".
    """

    def __init__(self, max_bytes: int, declared: int | None = None) -> None:
        size = (f"a body of {declared:,} bytes" if declared is not None
                else f"a body of more than {max_bytes:,} bytes")
        super().__init__(
            status_code=413,
            detail=f"request body too large: {size}; this server accepts at most "
            f"{max_bytes:,} bytes{_in_units(max_bytes)}, set by {MAX_REQUEST_BYTES_VAR}",
            headers={"Connection": "close"},
        )


class BodySizeLimitMiddleware:
    """Answers ``413`` to an HTTP request whose body is larger than ``max_bytes``.

    The response says ``Connection: close``, so the server reads no more of the body.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _refuse(RequestBodyTooLarge(self.max_bytes, declared), scope, receive, send)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise RequestBodyTooLarge(self.max_bytes)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except RequestBodyTooLarge as exc:
            # Only from an app that reads the body itself (the MCP endpoint): for a FastAPI
            # route, the app's HTTPException handler has answered it already.
            if started:
                raise
            await _refuse(exc, scope, receive, send)


async def _refuse(exc: RequestBodyTooLarge, scope: Scope, receive: Receive, send: Send) -> None:
    response = JSONResponse({"detail": exc.detail}, status_code=413, headers=exc.headers)
    await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server's HTTP parser refuses it before it gets here
    return None


def _in_units(size: int) -> str:
    for unit, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if size % unit == 0:
            return f" ({size // unit} {name})"
    return ""


def excerpt(value: Any) -> Any:
    """``value``, or a short stand-in when its text would take more than ``EXCERPT_CHARS``."""
    if isinstance(value, str):
        if len(value) <= EXCERPT_CHARS:
            return value
        return f"{value[:EXCERPT_CHARS]}... ({len(value):,} characters in all)"
    if not isinstance(value, (list, tuple, dict)):
        return value
    text = json.dumps(value, default=str)
    if len(text) <= EXCERPT_CHARS:
        return value
    what = (f"an object with keys {', '.join(map(str, list(value)[:10]))}"
            + (", ..." if len(value) > 10 else "")
            if isinstance(value, dict) else f"a list of {len(value):,} items")
    return f"{what} ({len(text):,} characters of JSON): {text[:EXCERPT_CHARS]}..."
