"""Streamable HTTP at ``/mcp`` on the FastAPI app, and the Host/Origin checks it is served with.

:class:`KernelEvalMCPServer` is the SDK's server with the transport settings it is served with,
and with a call's bad arguments worded as a REST 400 names them (not pydantic's own text).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, InputRequiredResult
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from mcp_tools.results import argument_errors, invalid_arguments
from shared.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

MCP_PATH = "/mcp"
# Kernel sources may be up to 1 MB and IOContracts may carry literal tensor data.
MAX_MCP_BODY_BYTES = 16 * 1024 * 1024
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class KernelEvalMCPServer(MCPServer):
    """The MCP server, plus the transport settings :func:`mount_mcp` serves it with."""

    def __init__(
        self,
        transport_security: TransportSecuritySettings,
        *,
        instructions: str,
        log_level: LogLevel,
    ) -> None:
        super().__init__("kernel-eval", instructions=instructions, log_level=log_level)
        self.transport_security = transport_security

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """The SDK's call, with arguments that do not validate reported field by field."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            errors = argument_errors(exc)
            if errors is None:
                raise
            # From the same cause: the SDK logs a ValidationError's fields (not its values).
            raise ToolError(invalid_arguments(name, errors)) from exc.__cause__


def transport_security_for(settings: Settings) -> TransportSecuritySettings:
    """Host/Origin checks against DNS rebinding, from ``MCP_ALLOWED_HOSTS``/``MCP_ALLOWED_ORIGINS``.

    - localhost, 127.0.0.1 and [::1], on any port, are always allowed (the SDK's own default).
    - Each configured host is allowed in addition: a bare name (``kernels.example.com``) on any
      port or none, a name with a port (``kernels.example.com:8443``) on that port only, and
      ``name:*`` on any port. ``*`` turns the Host/Origin check off (for a server behind a
      proxy that checks them itself).
    - Origins default to ``http(s)://`` each allowed host; browsers send one, agents usually
      do not, and a request without an Origin is accepted.
    """
    if "*" in settings.mcp_allowed_hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts: list[str] = []
    for host in (*LOCAL_HOSTS, *settings.mcp_allowed_hosts):
        if host.endswith(":*") or (":" in host and not host.endswith("]")):
            hosts.append(host)
        else:
            hosts += [host, f"{host}:*"]
    origins = list(settings.mcp_allowed_origins) or [
        f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")
    ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def mount_mcp(app: FastAPI, server: MCPServer) -> contextlib.AbstractAsyncContextManager[None]:
    """Serve ``server`` at ``/mcp`` on ``app``; return the context the app's lifespan must enter.

    The endpoint is a plain route, not a mount, so ``POST /mcp`` is answered directly (a mount
    would redirect it to ``/mcp/``). Each entry of the returned context starts a fresh session
    manager (the SDK's can run only once), so an app whose lifespan runs twice, as in tests,
    keeps working. Outside it, ``/mcp`` answers 503.
    """
    security = getattr(server, "transport_security", None) or transport_security_for(Settings())
    endpoint = _MCPEndpoint(server, security)
    # Starlette serves an endpoint that is not a function as a raw ASGI app.
    app.router.add_route(
        MCP_PATH,
        endpoint,  # type: ignore[arg-type]
        methods=["GET", "POST", "DELETE"],
        include_in_schema=False,
    )
    return endpoint


class _MCPEndpoint(contextlib.AbstractAsyncContextManager[None]):
    """ASGI endpoint of ``/mcp``, and the context that runs its session manager.

    Entering starts a new session manager, since the SDK's can run only once; requests are
    handed to it until the context exits.
    """

    def __init__(self, server: MCPServer, security: TransportSecuritySettings) -> None:
        self._server = server
        self._security = security
        self._manager: StreamableHTTPSessionManager | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> None:
        if self._stack is not None:
            raise RuntimeError("the MCP session manager is already running")
        # streamable_http_app() is the SDK's public way to get a new session manager; its
        # Starlette app is not used, this endpoint calls the manager directly.
        self._server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            transport_security=self._security,
            max_request_body_size=MAX_MCP_BODY_BYTES,
        )
        manager = self._server.session_manager
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(manager.run())
        self._stack, self._manager = stack, manager

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack, self._manager = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._manager
        if manager is None:
            response = JSONResponse({"detail": "the MCP service is not running"}, status_code=503)
            await response(scope, receive, send)
            return
        await manager.handle_request(scope, receive, send)
