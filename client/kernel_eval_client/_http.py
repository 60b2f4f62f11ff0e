"""The HTTP plumbing shared by :class:`~kernel_eval_client.client.KernelEvalClient` and its
async twin: the server URL, timeouts and retry settings; :class:`_Calls`, which builds each
API call and reads its answer (or raises the exception its status calls for); the reader of a
streamed ``/compare/batch`` answer; the polling of a job submitted with ``?wait=false``; and
the translation of httpx's exceptions into this package's.

No I/O happens here: the clients in :mod:`kernel_eval_client.client` send what this builds.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Generic, NoReturn, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from .exceptions import (
    AuthenticationError,
    InvalidRequestError,
    JobNotFoundError,
    JobTimeoutError,
    RequestTimeoutError,
    ServerBusyError,
    ServerError,
    ServerUnavailableError,
    TransportError,
    UnexpectedResponseError,
)
from .models import (
    CompareBatchRequest,
    CompareBatchResult,
    CompareBatchSummary,
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    EvaluationResponse,
    HealthResponse,
    JobState,
    JobStatusResponse,
    KernelCode,
    ProblemSize,
    StatsResponse,
    ValidateRequest,
)

DEFAULT_SERVER_URL = "http://localhost:8000"
SERVER_URL_ENV = "KERNEL_EVAL_SERVER"
API_KEY_ENV = "KERNEL_EVAL_API_KEY"
# Beyond a job's own timeout: time to queue for a device, start a worker and send the answer.
DEFAULT_TIMEOUT_MARGIN_S = 60.0
# For the quick endpoints (/health, /stats, /job/{id}).
QUICK_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
# A 429 (queue full) is sent again this many times, after the server's Retry-After, else
# after BUSY_BACKOFF_S doubling each time; never waiting more than MAX_BACKOFF_S at once.
DEFAULT_BUSY_RETRIES = 6
BUSY_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
# Polling a job submitted with ?wait=false: the first look after POLL_FIRST_S, then doubling.
POLL_FIRST_S = 0.05
POLL_MAX_S = 2.0
# ... at most POLL_WATCHED_MAX_S apart while an on_status callback watches the job: someone
# is looking at its state, and a finished job should not wait up to POLL_MAX_S to be seen.
POLL_WATCHED_MAX_S = 0.5

_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True)
class _Call(Generic[_M]):
    """One API call: what to send, how long to wait, what model the answer is."""

    method: str
    path: str
    model: type[_M]
    timeout: float
    body: dict[str, Any] | None = None
    job_id: str | None = None  # for /job/{id}: a 404 means no such job
    params: dict[str, str] | None = None
    ok_status: int = 200  # 202 for a job submitted with ?wait=false


class _Calls:
    """Builds the calls and reads the answers; the sync and async clients only do the I/O."""

    def __init__(
        self,
        base_url: str | None,
        timeout_margin: float,
        api_key: str | None = None,
        busy_retries: int = DEFAULT_BUSY_RETRIES,
        busy_backoff: float = BUSY_BACKOFF_S,
    ) -> None:
        url = httpx.URL(base_url or os.environ.get(SERVER_URL_ENV) or DEFAULT_SERVER_URL)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"server URL must be http(s)://host[:port], got {str(url)!r}")
        if busy_retries < 0:
            raise ValueError(f"busy_retries must not be negative, got {busy_retries}")
        self.base_url = str(url).rstrip("/")
        self.timeout_margin = timeout_margin
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
        self.api_key = key.strip() or None
        self.busy_retries = busy_retries
        self.busy_backoff = busy_backoff

    def headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        """Every request's headers: user agent, the API key if any, then ``extra``."""
        auth = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return _headers({**auth, **(extra or {})})

    def evaluate(
        self,
        kernel: KernelCode,
        num_trials: int | None,
        timeout: int,
        enable_device_metrics: bool | None,
    ) -> _Call[EvaluationResponse]:
        request = _build(
            EvaluationRequest,
            kernel=kernel,
            num_trials=num_trials,
            timeout=timeout,
            enable_device_metrics=enable_device_metrics,
        )
        return self._job("/evaluate", request, EvaluationResponse, timeout)

    def compare(
        self,
        ref_kernel: KernelCode,
        custom_kernel: KernelCode,
        num_trials: int | None,
        num_correct_trials: int,
        atol: float | None,
        rtol: float | None,
        timeout: int,
        enable_device_metrics: bool | None,
        robustness: bool = False,
        problem_size: ProblemSize | None = None,
    ) -> _Call[CompareResponse]:
        request = _build(
            CompareRequest,
            ref_kernel=ref_kernel,
            custom_kernel=custom_kernel,
            num_trials=num_trials,
            num_correct_trials=num_correct_trials,
            atol=atol,
            rtol=rtol,
            timeout=timeout,
            enable_device_metrics=enable_device_metrics,
            robustness=robustness,
            problem_size=problem_size,
        )
        return self._job("/compare", request, CompareResponse, timeout)

    def compare_batch(
        self,
        ref_kernel: KernelCode,
        custom_kernels: Sequence[KernelCode],
        num_trials: int | None,
        num_correct_trials: int,
        atol: float | None,
        rtol: float | None,
        timeout: int,
        enable_device_metrics: bool | None,
        reuse_reference: bool,
    ) -> _Call[CompareBatchResult]:
        request = _build(
            CompareBatchRequest,
            ref_kernel=ref_kernel,
            custom_kernels=list(custom_kernels),
            num_trials=num_trials,
            num_correct_trials=num_correct_trials,
            atol=atol,
            rtol=rtol,
            timeout=timeout,
            enable_device_metrics=enable_device_metrics,
            reuse_reference=reuse_reference,
        )
        # The timeout bounds the wait for each line: the answers come one job at a time.
        return self._job("/compare/batch", request, CompareBatchResult, timeout)

    def batch_reader(self, call: _Call[CompareBatchResult]) -> _BatchReader:
        """Reads the lines of ``call``'s streamed answer (see :meth:`compare_batch`)."""
        assert call.body is not None
        return _BatchReader(f"{call.method} {call.path}", len(call.body["custom_kernels"]))

    def validate(self, kernel: KernelCode, timeout: int) -> _Call[EvaluationResponse]:
        request = _build(ValidateRequest, kernel=kernel, timeout=timeout)
        return self._job("/validate", request, EvaluationResponse, timeout)

    def health(self) -> _Call[HealthResponse]:
        return _Call("GET", "/health", HealthResponse, QUICK_TIMEOUT_S)

    def stats(self) -> _Call[StatsResponse]:
        return _Call("GET", "/stats", StatsResponse, QUICK_TIMEOUT_S)

    def job_status(self, job_id: str) -> _Call[JobStatusResponse]:
        if not job_id:
            raise InvalidRequestError("job_id must not be empty")
        path = f"/job/{quote(job_id, safe='')}"
        return _Call("GET", path, JobStatusResponse, QUICK_TIMEOUT_S, job_id=job_id)

    def submit(self, call: _Call[Any]) -> _Call[JobStatusResponse]:
        """``call`` sent with ``?wait=false``: the server answers 202 with the queued job."""
        return _Call(
            call.method, call.path, JobStatusResponse, QUICK_TIMEOUT_S, body=call.body,
            params={"wait": "false"}, ok_status=202,
        )

    def poll(
        self, call: _Call[_M], accepted: JobStatusResponse, now: float, watched: bool
    ) -> _Poll[_M]:
        """The polling of ``call``'s job, accepted at ``now``; closer looks when ``watched``."""
        return _Poll(self, call, accepted, now, POLL_WATCHED_MAX_S if watched else POLL_MAX_S)

    def _job(self, path: str, request: BaseModel, model: type[_M], timeout: int) -> _Call[_M]:
        body = request.model_dump(mode="json", exclude_none=True)
        return _Call("POST", path, model, timeout + self.timeout_margin, body=body)

    def request_kwargs(self, call: _Call[Any]) -> dict[str, Any]:
        return {
            "method": call.method,
            "url": call.path,
            "json": call.body,
            "params": call.params,
            "timeout": httpx.Timeout(call.timeout, connect=min(call.timeout, CONNECT_TIMEOUT_S)),
        }

    def retry_delay(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before sending a refused call again (attempt 0 is the first
        retry); None when the answer is final: not a 429, or no retries left."""
        if response.status_code != 429 or attempt >= self.busy_retries:
            return None
        hint = _retry_after(response)
        wait = hint if hint is not None else self.busy_backoff * 2**attempt
        return min(wait, MAX_BACKOFF_S)

    def read(self, call: _Call[_M], response: httpx.Response) -> _M:
        """The answer as ``call.model``, or the exception its status calls for."""
        status = response.status_code
        where = f"{call.method} {call.path}"
        if status == call.ok_status:
            try:
                return call.model.model_validate_json(response.content)
            except ValidationError as exc:
                raise UnexpectedResponseError(
                    f"{where}: the answer is not a valid {call.model.__name__}: {exc}",
                    status_code=status,
                ) from exc
        self.fail(call, response)

    def fail(self, call: _Call[Any], response: httpx.Response) -> NoReturn:
        """Raise the exception a refused or failed ``call`` calls for (its body read)."""
        status = response.status_code
        where = f"{call.method} {call.path}"
        body = _json_or_none(response)
        detail = _detail(body) or response.text.strip() or response.reason_phrase
        if status == 408:
            job_id = body.get("job_id") if isinstance(body, dict) else None
            job_id = job_id if isinstance(job_id, str) else None
            raise JobTimeoutError(
                f"job {job_id + ' ' if job_id else ''}timed out: {detail}", job_id=job_id
            )
        if status in (400, 422):
            errors = _field_errors(body)
            message = "; ".join(_describe(e) for e in errors) if errors else detail
            raise InvalidRequestError(
                f"invalid request to {where}: {message}", errors=errors, status_code=status
            )
        if status == 404 and call.job_id is not None:
            raise JobNotFoundError(f"no job with id {call.job_id!r}", status_code=404)
        if status in (401, 403):
            hint = "" if self.api_key else f" (pass api_key= or set ${API_KEY_ENV})"
            raise AuthenticationError(f"{where} refused: {detail}{hint}", status_code=status)
        if status == 429:
            raise ServerBusyError(
                f"{where}: the server is busy after {self.busy_retries} retries: {detail}",
                retry_after=_retry_after(response),
            )
        if status >= 500:
            raise ServerError(
                f"server error on {where} (HTTP {status}): {detail}", status_code=status
            )
        raise UnexpectedResponseError(
            f"unexpected answer to {where} (HTTP {status}): {detail}", status_code=status
        )


class _BatchReader:
    """The lines of a ``/compare/batch`` answer: a result per candidate, then a summary.

    Checks that none is missing: a stream cut short raises instead of ending quietly.
    """

    def __init__(self, where: str, expected: int) -> None:
        self.where = where
        self.expected = expected
        self.received = 0
        self.summary: CompareBatchSummary | None = None

    def feed(self, line: str) -> CompareBatchResult | None:
        """The result on ``line``, or None for the summary line (kept in :attr:`summary`)."""
        if not line.strip():
            return None
        try:
            data = json.loads(line)
            if isinstance(data, dict) and data.get("done") is True:
                self.summary = CompareBatchSummary.model_validate(data)
                return None
            result = CompareBatchResult.model_validate(data)
        except ValueError as exc:  # not JSON, or not the model
            raise UnexpectedResponseError(
                f"{self.where}: a line of the answer is not a batch result: {exc}",
                status_code=200,
            ) from exc
        self.received += 1
        return result

    def finish(self) -> CompareBatchSummary:
        """The summary, once the stream has ended; raises if it ended early."""
        if self.summary is None:
            raise ServerUnavailableError(
                f"{self.where}: the answer ended after {self.received} of {self.expected} "
                "results; the other jobs may still run on the server (see GET /job/{job_id})"
            )
        if not self.summary.count == self.received == self.expected:
            raise UnexpectedResponseError(
                f"{self.where}: {self.received} results came for {self.expected} candidates "
                f"and the summary counts {self.summary.count}",
                status_code=200,
            )
        return self.summary


class _Poll(Generic[_M]):
    """A job submitted with ``?wait=false``: when to look again, and its answer once final.

    The answer and the exceptions are those the waiting call would have given.
    """

    def __init__(
        self, calls: _Calls, call: _Call[_M], accepted: JobStatusResponse, now: float,
        max_delay: float = POLL_MAX_S,
    ) -> None:
        self.job_id = accepted.job_id
        self.status_call = calls.job_status(accepted.job_id)
        self._model = call.model
        self._timeout = call.timeout
        self._deadline = now + call.timeout
        self._delay = POLL_FIRST_S
        self._max_delay = max_delay

    def result(self, status: JobStatusResponse) -> _M | None:
        """The job's answer once it is final (or the exception for it), else None."""
        if status.state in (JobState.QUEUED, JobState.RUNNING):
            return None
        detail = status.error or (status.result.error if status.result else None) or "no detail"
        if status.state is JobState.TIMED_OUT:
            raise JobTimeoutError(f"job {self.job_id} timed out: {detail}", job_id=self.job_id)
        if status.state is JobState.COMPLETED and status.result is not None:
            fields = set(self._model.model_fields)
            return self._model.model_validate(status.result.model_dump(include=fields))
        raise ServerError(f"job {self.job_id} failed in the server: {detail}")

    def next_delay(self, now: float) -> float:
        """Seconds until the next look; raises once the job's time (timeout + margin) is up."""
        if now >= self._deadline:
            raise RequestTimeoutError(
                f"job {self.job_id} did not finish within {self._timeout:.0f} s; it may still "
                f"be running on the server (GET /job/{self.job_id})"
            )
        delay = min(self._delay, self._deadline - now)
        self._delay = min(self._delay * 2, self._max_delay)
        return delay


# ---- helpers -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _translate_errors(base_url: str) -> Iterator[None]:
    """httpx's exceptions, as this package's (the original stays as ``__cause__``)."""
    try:
        yield
    except httpx.ConnectTimeout as exc:
        raise ServerUnavailableError(f"cannot connect to {base_url}: timed out") from exc
    except httpx.TimeoutException as exc:
        raise RequestTimeoutError(
            f"no answer from {base_url} in time ({type(exc).__name__}); the job may still be "
            "running on the server"
        ) from exc
    except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        raise ServerUnavailableError(
            f"cannot reach the server at {base_url}: {exc or type(exc).__name__}"
        ) from exc
    except httpx.HTTPError as exc:
        raise TransportError(f"HTTP error talking to {base_url}: {exc}") from exc


def _build(model: type[_M], **fields: Any) -> _M:
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        raise InvalidRequestError(
            "invalid request: " + "; ".join(_describe(e) for e in errors), errors=errors
        ) from exc


def _headers(extra: Mapping[str, str] | None) -> dict[str, str]:
    from . import __version__

    return {"user-agent": f"kernel-eval-client/{__version__}", **(extra or {})}


def _retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (it may be a number or an HTTP date), if usable."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max((when - datetime.now(timezone.utc)).total_seconds(), 0.0)


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _detail(body: Any) -> str | None:
    """The human part of an error body: FastAPI's ``detail`` or the API's ``error``."""
    if not isinstance(body, dict):
        return None
    for key in ("error", "detail"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _field_errors(body: Any) -> list[dict[str, Any]]:
    detail = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(detail, list):
        return []
    return [e for e in detail if isinstance(e, dict) and "msg" in e]


def _describe(error: Mapping[str, Any]) -> str:
    """``kernel.io.args.0.tensor_spec: Field required``; FastAPI's leading "body" is dropped."""
    loc = [str(part) for part in error.get("loc", [])]
    if loc and loc[0] in ("body", "query", "path"):
        loc = loc[1:]
    return f"{'.'.join(loc) or 'request'}: {error.get('msg', 'invalid')}"
