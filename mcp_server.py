"""MCP tools over Streamable HTTP at ``/mcp``, served by the same FastAPI app and port as REST.

Six tools (``evaluate_kernel``, ``compare_kernels``, ``compare_batch``, ``validate_kernel``,
``get_server_stats``, ``get_job_status``) call the same
:class:`~orchestration.job_manager.JobManager` the REST routes use. This module assembles the
server; the parts live in :mod:`mcp_tools` by concern: the argument types and descriptions
(``schemas``), the tools (``tools``), job outcomes as tool results (``results``) and the
transport (``transport``).

What an agent gets back:

- a kernel's failure (compile error, wrong output, runtime error) is a normal result: the verdict
  is in ``kernel_exec_result.outcome`` with the full error message, first summarised in a line
  of text;
- a bad argument, a full queue, a job that ran past its timeout, or a fault of the server is an
  error result (``isError``) whose text says what to change. Nothing waits forever.

Wiring (app.py)::

    server = create_mcp_server(state.current_manager, settings)
    mcp_lifespan = mount_mcp(app, server)  # adds the route GET/POST/DELETE /mcp
    ...                                    # and in the app's lifespan, once the manager exists:
    await stack.enter_async_context(mcp_lifespan)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

from mcp.server import MCPServer

from mcp_tools.schemas import INSTRUCTIONS, BatchResults, ServerStatus
from mcp_tools.tools import HEARTBEAT_S, QUEUE_ALLOWANCE_S, KernelTools
from mcp_tools.transport import (
    MCP_PATH,
    KernelEvalMCPServer,
    LogLevel,
    mount_mcp,
    transport_security_for,
)
from orchestration.admission import Admission
from shared.settings import Settings

if TYPE_CHECKING:
    from orchestration.job_manager import JobManager

__all__ = [
    "HEARTBEAT_S",
    "MCP_PATH",
    "QUEUE_ALLOWANCE_S",
    "BatchResults",
    "KernelTools",
    "ServerStatus",
    "create_mcp_server",
    "mount_mcp",
    "transport_security_for",
]

_LOG_LEVELS: tuple[LogLevel, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def create_mcp_server(
    get_manager: Callable[[], JobManager],
    settings: Settings,
    *,
    heartbeat_s: float = HEARTBEAT_S,
    admission: Admission | None = None,
    queue_allowance_s: float = QUEUE_ALLOWANCE_S,
) -> MCPServer:
    """Build the MCP server with the kernel tools.

    ``get_manager`` is called on every tool call (the JobManager is created in the app's
    lifespan, after this server). ``heartbeat_s`` is how often progress is re-sent while a job
    runs. ``admission`` refuses jobs while the queue is full (default: ``MAX_QUEUED_JOBS``,
    refusals not counted in any metrics). ``queue_allowance_s`` is how long, beyond its
    timeout, a tool waits for a job before giving up.
    """
    level: LogLevel = next((lv for lv in _LOG_LEVELS if lv == settings.log_level.upper()), "INFO")
    server = KernelEvalMCPServer(
        transport_security_for(settings), instructions=INSTRUCTIONS, log_level=level
    )
    tools = KernelTools(
        get_manager, settings, heartbeat_s=heartbeat_s,
        admission=admission or Admission(settings.max_queued_jobs),
        queue_allowance_s=queue_allowance_s,
    )
    for tool in tools.all():
        # cleandoc: the docstring is the description an agent reads, without the indentation.
        server.add_tool(tool, description=inspect.cleandoc(tool.__doc__ or ""))
    return server
