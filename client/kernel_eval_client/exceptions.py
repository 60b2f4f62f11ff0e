"""Exceptions raised by the client.

A kernel that fails to compile, crashes or gives wrong results is not an exception: the server
answers normally and the result's ``kernel_exec_result.outcome`` says what happened. These
exceptions are for requests that got no verdict::

    KernelEvalError
    ├── TransportError              no usable answer from the server
    │   ├── ServerUnavailableError  connection refused or dropped, DNS failure
    │   └── RequestTimeoutError     no answer within the client's HTTP timeout
    ├── JobTimeoutError             HTTP 408: the job ran past its timeout and was killed
    ├── InvalidRequestError         HTTP 400/422, or a request the client could not build
    │   └── JobNotFoundError        HTTP 404 from /job/{job_id}
    ├── ServerError                 HTTP 5xx: a fault of the server, not of the kernel
    └── UnexpectedResponseError     any other status, or a body that is not the expected model
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "InvalidRequestError",
    "JobNotFoundError",
    "JobTimeoutError",
    "KernelEvalError",
    "RequestTimeoutError",
    "ServerError",
    "ServerUnavailableError",
    "TransportError",
    "UnexpectedResponseError",
]


class KernelEvalError(Exception):
    """Base class of every client exception.

    ``status_code`` is the HTTP status when the server answered, else ``None``.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class TransportError(KernelEvalError):
    """The request got no usable HTTP answer."""


class ServerUnavailableError(TransportError):
    """The server could not be reached, or dropped the connection."""


class RequestTimeoutError(TransportError):
    """The server did not answer within the client's HTTP timeout."""


class JobTimeoutError(KernelEvalError):
    """The server killed the job after its timeout (HTTP 408).

    ``job_id`` names the job (for ``job_status``) when the server's answer carried it.
    """

    def __init__(self, message: str, *, job_id: str | None = None) -> None:
        super().__init__(message, status_code=408)
        self.job_id = job_id


class InvalidRequestError(KernelEvalError):
    """The request was refused as invalid (HTTP 400/422) or could not be built.

    ``errors`` lists the problems, each ``{"loc": [...], "msg": "..."}`` as FastAPI reports
    them; the message names each field and its problem.
    """

    def __init__(
        self,
        message: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code)
        self.errors = errors or []


class JobNotFoundError(InvalidRequestError):
    """No job with that id (HTTP 404): unknown, or removed after its retention period."""


class ServerError(KernelEvalError):
    """The server failed (HTTP 5xx). Not a verdict on the kernel; retrying may help."""


class UnexpectedResponseError(KernelEvalError):
    """The server answered with a status or a body this client does not understand."""
