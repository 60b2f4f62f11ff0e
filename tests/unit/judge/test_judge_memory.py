"""A judge whose own buffers do not fit answers with an out-of-memory failure the server's
memory retry acts on, not an internal error (a false runtime_error under concurrency)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from judge.session import JudgeSession
from shared.models import Outcome
from shared.protocol import Failure, Trials


def session_raising(exc: BaseException, monkeypatch: pytest.MonkeyPatch) -> JudgeSession:
    def fail(self: JudgeSession, message: Any, fds: list[int]) -> Any:
        raise exc

    judge = JudgeSession("cpu", timer=None)  # type: ignore[arg-type]
    monkeypatch.setitem(JudgeSession.HANDLERS, Trials, fail)
    return judge


def test_the_judge_out_of_memory_is_a_failure_the_memory_retry_acts_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    judge = session_raising(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate "
                                                   "6.00 GiB"), monkeypatch)
    reply = judge.handle(Trials(first=0, count=1), [])
    assert isinstance(reply, Failure), reply
    assert reply.out_of_memory and reply.outcome == Outcome.RUNTIME_ERROR
    assert reply.message.startswith("the judge ran out of GPU memory for this problem's buffers "
                                    "while it did Trials")
    assert "Tried to allocate 6.00 GiB" in reply.message


def test_any_other_fault_of_the_judge_stays_a_fault_of_the_harness(
        monkeypatch: pytest.MonkeyPatch) -> None:
    judge = session_raising(KeyError("a bug"), monkeypatch)
    with pytest.raises(KeyError):  # subprocess_worker.answer reports it as an InternalError
        judge.handle(Trials(first=0, count=1), [])
