"""HTTP clients of the Kernel Evaluation Server: :class:`KernelEvalClient` and its async twin.

Both send the API's wire models and return them typed::

    from kernel_eval_client import KernelEvalClient, KernelCode, KernelType

    with KernelEvalClient("http://localhost:8000") as client:
        result = client.evaluate(KernelCode(source_code=src, kernel_type=KernelType.TORCH))
        print(result.kernel_exec_result.runtime)

A kernel's failure comes back as a normal result (see ``kernel_exec_result.outcome``); the
exceptions of :mod:`kernel_eval_client.exceptions` are for requests that got no verdict.

A job call either waits on one HTTP request until the job is done (the default), or, with
``poll=True``, submits with ``?wait=false`` and polls ``GET /job/{id}`` with a growing interval
(for proxies that cut long requests). ``on_status=`` polls too, and hands each status it reads
(queued, running on which GPU, done) to a callback, e.g. to show progress. A ``429`` (the server's queue is full) is retried with
backoff, as long as the server's ``Retry-After`` says, up to ``busy_retries`` times.

``compare_batch`` sends many candidates against one reference and yields each answer as the
server streams it (``POST /compare/batch``, NDJSON)::

    for result in client.compare_batch(ref, [kernel_a, kernel_b]):
        print(result.index, result.verdict)

The clients here only do the I/O; the plumbing both share (building each call, reading its
answer, retrying a 429, polling a job, reading a streamed batch) is in :mod:`._http`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from types import TracebackType

import httpx
from typing_extensions import Self

# The settings live with the plumbing that uses them; those this module does not use are
# imported all the same, so that they stay importable from here.
from ._http import (  # noqa: F401
    _M,
    API_KEY_ENV,
    BUSY_BACKOFF_S,
    CONNECT_TIMEOUT_S,
    DEFAULT_BUSY_RETRIES,
    DEFAULT_SERVER_URL,
    DEFAULT_TIMEOUT_MARGIN_S,
    MAX_BACKOFF_S,
    POLL_FIRST_S,
    POLL_MAX_S,
    POLL_WATCHED_MAX_S,
    QUICK_TIMEOUT_S,
    SERVER_URL_ENV,
    _Call,
    _Calls,
    _translate_errors,
)
from .models import (
    CompareBatchResult,
    CompareResponse,
    EvaluationResponse,
    HealthResponse,
    JobStatusResponse,
    KernelCode,
    ProblemSize,
    StatsResponse,
)

__all__ = [
    "DEFAULT_SERVER_URL",
    "AsyncKernelEvalClient",
    "KernelEvalClient",
]

# Called with the job's status on submission and after every look while the job is polled.
StatusCallback = Callable[[JobStatusResponse], None]


class KernelEvalClient:
    """Blocking client. Use it as a context manager, or call :meth:`close` when done.

    ``base_url`` defaults to ``$KERNEL_EVAL_SERVER``, else ``http://localhost:8000``;
    ``api_key`` to ``$KERNEL_EVAL_API_KEY`` (sent as ``Authorization: Bearer``). Each job call
    waits for the job's ``timeout`` plus ``timeout_margin`` seconds; a job refused with 429
    (queue full) is retried up to ``busy_retries`` times. ``transport`` replaces httpx's
    network transport (e.g. ``httpx.MockTransport`` in tests).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout_margin: float = DEFAULT_TIMEOUT_MARGIN_S,
        busy_retries: int = DEFAULT_BUSY_RETRIES,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._calls = _Calls(base_url, timeout_margin, api_key, busy_retries)
        self._http = httpx.Client(
            base_url=self._calls.base_url, headers=self._calls.headers(headers),
            transport=transport,
        )

    @property
    def base_url(self) -> str:
        return self._calls.base_url

    def evaluate(
        self,
        kernel: KernelCode,
        *,
        num_trials: int | None = None,
        timeout: int = 120,
        enable_device_metrics: bool | None = None,
        poll: bool = False,
        on_status: StatusCallback | None = None,
    ) -> EvaluationResponse:
        """Compile, run and time one kernel (``POST /evaluate``).

        ``poll=True`` submits with ``?wait=false`` and polls the job; ``on_status`` (which
        implies polling) is called with each status read meanwhile.
        """
        call = self._calls.evaluate(kernel, num_trials, timeout, enable_device_metrics)
        return self._run(call, poll, on_status)

    def compare(
        self,
        ref_kernel: KernelCode,
        custom_kernel: KernelCode,
        *,
        num_trials: int | None = None,
        num_correct_trials: int = 5,
        atol: float | None = None,
        rtol: float | None = None,
        timeout: int = 120,
        enable_device_metrics: bool | None = None,
        robustness: bool = False,
        problem_size: ProblemSize | None = None,
        poll: bool = False,
        on_status: StatusCallback | None = None,
    ) -> CompareResponse:
        """Check ``custom_kernel`` against ``ref_kernel``, then time both (``POST /compare``);
        ``robustness``: recheck a correct candidate on inputs unlike the trials';
        ``problem_size``: the problem's FLOPs and bytes, for speed of light; ``poll`` and
        ``on_status`` as in :meth:`evaluate`."""
        return self._run(
            self._calls.compare(
                ref_kernel,
                custom_kernel,
                num_trials,
                num_correct_trials,
                atol,
                rtol,
                timeout,
                enable_device_metrics,
                robustness,
                problem_size,
            ),
            poll,
            on_status,
        )

    def compare_batch(
        self,
        ref_kernel: KernelCode,
        custom_kernels: Sequence[KernelCode],
        *,
        num_trials: int | None = None,
        num_correct_trials: int = 5,
        atol: float | None = None,
        rtol: float | None = None,
        timeout: int = 120,
        enable_device_metrics: bool | None = None,
        reuse_reference: bool = True,
    ) -> Iterator[CompareBatchResult]:
        """Check each of ``custom_kernels`` against ``ref_kernel`` (``POST /compare/batch``).

        Yields each candidate's answer as its job finishes (``result.index`` says which
        candidate; ``result.status_code`` what ``compare`` alone would have got: a timed-out
        or failed job is a result here, not an exception). The request is sent when the
        iteration starts; an exception is raised for a refused request or a cut stream.
        """
        call = self._calls.compare_batch(
            ref_kernel, custom_kernels, num_trials, num_correct_trials, atol, rtol, timeout,
            enable_device_metrics, reuse_reference,
        )
        return self._stream(call)

    def validate(
        self, kernel: KernelCode, *, timeout: int = 120, poll: bool = False,
        on_status: StatusCallback | None = None,
    ) -> EvaluationResponse:
        """Check that a kernel compiles and runs once, without timing (``POST /validate``);
        ``poll`` and ``on_status`` as in :meth:`evaluate`."""
        return self._run(self._calls.validate(kernel, timeout), poll, on_status)

    def health(self) -> HealthResponse:
        """``GET /health``."""
        return self._send(self._calls.health())

    def stats(self) -> StatsResponse:
        """``GET /stats``."""
        return self._send(self._calls.stats())

    def job_status(self, job_id: str) -> JobStatusResponse:
        """``GET /job/{job_id}``; raises :class:`JobNotFoundError` for an unknown id."""
        return self._send(self._calls.job_status(job_id))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KernelEvalClient({self.base_url!r})"

    def _run(self, call: _Call[_M], poll: bool, on_status: StatusCallback | None) -> _M:
        if not poll and on_status is None:
            return self._send(call)
        status = self._send(self._calls.submit(call))
        job = self._calls.poll(call, status, time.monotonic(), watched=on_status is not None)
        while True:
            if on_status is not None:
                on_status(status)
            if (result := job.result(status)) is not None:
                return result
            time.sleep(job.next_delay(time.monotonic()))
            status = self._send(job.status_call)

    def _send(self, call: _Call[_M]) -> _M:
        for attempt in itertools.count():
            with _translate_errors(self.base_url):
                response = self._http.request(**self._calls.request_kwargs(call))
            delay = self._calls.retry_delay(response, attempt)
            if delay is None:
                break
            time.sleep(delay)
        return self._calls.read(call, response)

    def _stream(self, call: _Call[CompareBatchResult]) -> Iterator[CompareBatchResult]:
        reader = self._calls.batch_reader(call)
        for attempt in itertools.count():
            with _translate_errors(self.base_url), self._http.stream(
                **self._calls.request_kwargs(call)
            ) as response:
                delay = self._calls.retry_delay(response, attempt)
                if delay is None:
                    if response.status_code != call.ok_status:
                        response.read()
                        self._calls.fail(call, response)
                    for line in response.iter_lines():
                        result = reader.feed(line)
                        if result is not None:
                            yield result
                    reader.finish()
                    return
            time.sleep(delay)


class AsyncKernelEvalClient:
    """The asyncio twin of :class:`KernelEvalClient`, with the same methods, awaited."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout_margin: float = DEFAULT_TIMEOUT_MARGIN_S,
        busy_retries: int = DEFAULT_BUSY_RETRIES,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._calls = _Calls(base_url, timeout_margin, api_key, busy_retries)
        self._http = httpx.AsyncClient(
            base_url=self._calls.base_url, headers=self._calls.headers(headers),
            transport=transport,
        )

    @property
    def base_url(self) -> str:
        return self._calls.base_url

    async def evaluate(
        self,
        kernel: KernelCode,
        *,
        num_trials: int | None = None,
        timeout: int = 120,
        enable_device_metrics: bool | None = None,
        poll: bool = False,
        on_status: StatusCallback | None = None,
    ) -> EvaluationResponse:
        """Compile, run and time one kernel (``POST /evaluate``); ``poll`` and ``on_status``
        as in :meth:`KernelEvalClient.evaluate`."""
        call = self._calls.evaluate(kernel, num_trials, timeout, enable_device_metrics)
        return await self._run(call, poll, on_status)

    async def compare(
        self,
        ref_kernel: KernelCode,
        custom_kernel: KernelCode,
        *,
        num_trials: int | None = None,
        num_correct_trials: int = 5,
        atol: float | None = None,
        rtol: float | None = None,
        timeout: int = 120,
        enable_device_metrics: bool | None = None,
        robustness: bool = False,
        problem_size: ProblemSize | None = None,
        poll: bool = False,
        on_status: StatusCallback | None = None,
    ) -> CompareResponse:
        """Check ``custom_kernel`` against ``ref_kernel``, then time both (``POST /compare``);
        ``robustness``: recheck a correct candidate on inputs unlike the trials';
        ``problem_size``: the problem's FLOPs and bytes, for speed of light; ``poll`` and
        ``on_status`` as in :meth:`evaluate`."""
        return await self._run(
            self._calls.compare(
                ref_kernel,
                custom_kernel,
                num_trials,
                num_correct_trials,
                atol,
                rtol,
                timeout,
                enable_device_metrics,
                robustness,
                problem_size,
            ),
            poll,
            on_status,
        )

    def compare_batch(
        self,
        ref_kernel: KernelCode,
        custom_kernels: Sequence[KernelCode],
        *,
        num_trials: int | None = None,
        num_correct_trials: int = 5,
        atol: float | None = None,
        rtol: float | None = None,
        timeout: int = 120,
        enable_device_metrics: bool | None = None,
        reuse_reference: bool = True,
    ) -> AsyncIterator[CompareBatchResult]:
        """Check each of ``custom_kernels`` against ``ref_kernel`` (``POST /compare/batch``);
        an async iterator of the answers as they finish (``async for result in ...``).

        As :meth:`KernelEvalClient.compare_batch`.
        """
        call = self._calls.compare_batch(
            ref_kernel, custom_kernels, num_trials, num_correct_trials, atol, rtol, timeout,
            enable_device_metrics, reuse_reference,
        )
        return self._stream(call)

    async def validate(
        self, kernel: KernelCode, *, timeout: int = 120, poll: bool = False,
        on_status: StatusCallback | None = None,
    ) -> EvaluationResponse:
        """Check that a kernel compiles and runs once, without timing (``POST /validate``);
        ``poll`` and ``on_status`` as in :meth:`KernelEvalClient.evaluate`."""
        return await self._run(self._calls.validate(kernel, timeout), poll, on_status)

    async def health(self) -> HealthResponse:
        """``GET /health``."""
        return await self._send(self._calls.health())

    async def stats(self) -> StatsResponse:
        """``GET /stats``."""
        return await self._send(self._calls.stats())

    async def job_status(self, job_id: str) -> JobStatusResponse:
        """``GET /job/{job_id}``; raises :class:`JobNotFoundError` for an unknown id."""
        return await self._send(self._calls.job_status(job_id))

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncKernelEvalClient({self.base_url!r})"

    async def _run(self, call: _Call[_M], poll: bool, on_status: StatusCallback | None) -> _M:
        if not poll and on_status is None:
            return await self._send(call)
        status = await self._send(self._calls.submit(call))
        job = self._calls.poll(call, status, time.monotonic(), watched=on_status is not None)
        while True:
            if on_status is not None:
                on_status(status)
            if (result := job.result(status)) is not None:
                return result
            await asyncio.sleep(job.next_delay(time.monotonic()))
            status = await self._send(job.status_call)

    async def _send(self, call: _Call[_M]) -> _M:
        for attempt in itertools.count():
            with _translate_errors(self.base_url):
                response = await self._http.request(**self._calls.request_kwargs(call))
            delay = self._calls.retry_delay(response, attempt)
            if delay is None:
                break
            await asyncio.sleep(delay)
        return self._calls.read(call, response)

    async def _stream(self, call: _Call[CompareBatchResult]) -> AsyncIterator[CompareBatchResult]:
        reader = self._calls.batch_reader(call)
        for attempt in itertools.count():
            with _translate_errors(self.base_url):
                async with self._http.stream(**self._calls.request_kwargs(call)) as response:
                    delay = self._calls.retry_delay(response, attempt)
                    if delay is None:
                        if response.status_code != call.ok_status:
                            await response.aread()
                            self._calls.fail(call, response)
                        async for line in response.aiter_lines():
                            result = reader.feed(line)
                            if result is not None:
                                yield result
                        reader.finish()
                        return
            await asyncio.sleep(delay)

