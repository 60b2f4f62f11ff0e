"""A judge, or a kernel's process, whose harness buffers for a problem do not fit beside the
other jobs' memory answers with an out-of-memory failure the server's memory retry acts on,
not an internal error (on the H100, KernelBench's 6 GB problems four at once got a false
runtime_error, and a false "broke the protocol")."""

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


def test_a_kernel_process_that_cannot_map_a_large_problem_answers_out_of_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # before: the allocation's error became an internal error, which the judge must read as
    # the kernel's code writing to its channel (a false "broke the protocol" verdict)
    import os
    from types import SimpleNamespace

    from harness.arena import Arena
    from kernel_side.session import KernelSession
    from shared.protocol import ArenaLayout, MapArena

    def attach(*args: Any, **kwargs: Any) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")

    monkeypatch.setattr(Arena, "attach", attach)
    side = KernelSession("cpu", SimpleNamespace(  # type: ignore[arg-type]
        sync=lambda: None, warm_pages=lambda memory: None))
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    reply = side.handle(MapArena(layout=ArenaLayout.model_construct()), [read_fd])
    os.close(read_fd)
    assert isinstance(reply, Failure) and reply.out_of_memory, reply
    assert "mapping the problem's inputs and outputs" in reply.message
