"""The /evaluate flow against a scripted worker: which process it asks the pool for."""

from __future__ import annotations

import asyncio

from orchestration import verdicts
from orchestration.flows.evaluate import evaluate
from shared.models import KernelCode, Outcome, WorkerJob
from shared.protocol import Failure
from tests.unit.orchestration.fakes import FakeSeat, FakeWorker, kernel_script

PLAIN = KernelCode(source_code="class ModelNew:\n    def forward(self, x):\n        return x * 2\n",
                   kernel_type="torch")
MATMUL = KernelCode(source_code="class ModelNew:\n    def forward(self, a, b):\n"
                                "        return a @ b\n", kernel_type="torch")


def test_an_evaluation_asks_for_a_process_made_for_a_kernel_alone_warmed_as_its_source_needs(
) -> None:
    for kernel, cublas in ((PLAIN, False), (MATMUL, True)):
        failing = FakeWorker("kernel", kernel_script(load=Failure(
            outcome=Outcome.COMPILE_ERROR, message="SyntaxError: no")))
        seat = FakeSeat([failing])
        job = WorkerJob(job_id="e1", kind="evaluate", kernel=kernel, cache_dir="/c")
        result = verdicts.of(job, asyncio.run(evaluate(job, seat)))  # type: ignore[arg-type]
        assert result.kernel_exec_result is not None
        assert result.kernel_exec_result.outcome == Outcome.COMPILE_ERROR
        assert [(n.alone, n.cublas) for n in seat.needs] == [(True, cublas)]
