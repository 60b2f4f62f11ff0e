"""The MCP side of the server, by concern; :mod:`mcp_server` assembles it.

- :mod:`mcp_tools.schemas`: what an agent reads before calling: the server's instructions, the
  argument types with their descriptions, and the result models that are not API wire models.
- :mod:`mcp_tools.tools`: the tools themselves (:class:`~mcp_tools.tools.KernelTools`), calling
  the same JobManager as the REST routes, with progress notifications.
- :mod:`mcp_tools.results`: a finished job as a tool result; whether it is an error result
  follows from the job's state, in :func:`~mcp_tools.results.job_error` alone.
- :mod:`mcp_tools.transport`: Streamable HTTP at ``/mcp`` on the FastAPI app, and its
  Host/Origin checks.

(Not named ``mcp``: that would shadow the MCP SDK.)
"""
