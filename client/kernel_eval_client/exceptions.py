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
    ├── AuthenticationError         HTTP 401/403: a missing or wrong API key
    ├── ServerBusyError             HTTP 429: the server's queue stayed full through every retry
    ├── ServerError                 HTTP 5xx: a fault of the server, not of the kernel
    └── UnexpectedResponseError     any other status, or a body that is not the expected model
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthenticationError",
    "InvalidRequestError",
    "JobNotFoundError",
    "JobTimeoutError",
    "KernelEvalError",
    "RequestTimeoutError",
    "ServerBusyError",
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


class AuthenticationError(KernelEvalError):
    """The server wants an API key (HTTP 401) or refused this one (403).

    Pass ``api_key=`` to the client or set ``KERNEL_EVAL_API_KEY``.
    """


class ServerBusyError(KernelEvalError):
    """The server refused the job because too many were queued (HTTP 429), on every attempt.

    ``retry_after`` is the server's last Retry-After hint in seconds, when it sent one.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, status_code=429)
        self.retry_after = retry_after


class ServerError(KernelEvalError):
    """The server failed (HTTP 5xx). Not a verdict on the kernel; retrying may help."""


class UnexpectedResponseError(KernelEvalError):
    """The server answered with a status or a body this client does not understand."""
