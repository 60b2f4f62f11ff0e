"""Honest kernels of every type pass and are never flagged (issue 7).

The other half of the adversarial corpus: defences against cheating must not cost honest
kernels their verdict. Each kernel here must pass (compiled, correct, success), carry an
``integrity`` block with ``suspicious`` false, and, in a comparison, report its speedup on
medians below the review threshold (its reference is a sensible torch equivalent).
"""

from __future__ import annotations

import pytest

from tests.adversarial.catalogue import HONEST, HONEST_FEATURES, KERNEL_TYPES, module_of
from tests.adversarial.conftest import RunningServer
from tests.adversarial.corpus import Honest, exec_result, passed, run, summary
from tests.adversarial.test_cheats import dummy_target, params

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial]

SPEEDUP_REVIEW_THRESHOLD = 10.0  # the server's default (setting SPEEDUP_REVIEW_THRESHOLD)


@pytest.mark.parametrize("case", params(HONEST))
def test_honest_kernel_passes_unflagged(case: Honest, adversarial_server: RunningServer) -> None:
    target = adversarial_server.target()
    job = case.build(target)
    adversarial_server.settle()
    body = run(adversarial_server.client, job)
    assert passed(body), f"honest kernel {case.name} ({case.what}) failed: {summary(body)}"
    result = exec_result(body)
    # CONTRACT (issue 7): every kernel result carries its integrity block.
    block = result.get("integrity")
    assert block is not None, (
        f"CONTRACT (issue 7): kernel_exec_result.integrity is missing for {case.name}: "
        f"{summary(body)}"
    )
    assert block["suspicious"] is False, (
        f"honest kernel {case.name} ({case.what}) was flagged: {block.get('reasons')}; "
        f"{summary(body)}"
    )
    assert isinstance(block["checks"], list) and all(isinstance(c, str) for c in block["checks"])
    if job.route == "/compare":
        assert block["checks"], f"a comparison that checked nothing: {block}"
        meta = result["metadata"]
        # CONTRACT (issue 7): speedups are ratios of medians.
        assert meta.get("speedup_statistic") == "median", f"CONTRACT (issue 7): {meta}"
        if meta["speedup"] is None and not target.gpu:
            # calls cheaper than the hand-over's spread on a shared host: no figure, said so
            assert any(c.startswith("no speedup") for c in block["checks"]), block
            return
        if "reference_slow_on_cpu" in case.features and not target.gpu:
            # a real speedup, not a measuring error: its reference's op has no fast CPU path
            assert meta["speedup"] > 0
            return
        assert 0 < meta["speedup"] <= SPEEDUP_REVIEW_THRESHOLD, (
            f"{case.name} claims {meta['speedup']:.3g}x over its reference: {summary(body)}"
        )


def test_honest_catalogue_covers_every_kernel_type() -> None:
    assert len(HONEST) >= 30
    names = [c.name for c in HONEST]
    assert len(names) == len(set(names)), "case names must be unique"
    for kind in KERNEL_TYPES:
        assert any(c.kernel_type == kind for c in HONEST), f"no honest {kind} kernel"
    for feature in HONEST_FEATURES:
        assert any(feature in c.features for c in HONEST), f"no honest kernel with {feature}"
    # CPU mode (CI) runs torch, triton (interpreter) and multi_kernel kernels
    for kind in ("torch", "triton", "multi_kernel"):
        assert sum(c.kernel_type == kind and not c.gpu for c in HONEST) >= 4, kind
    assert all(c.gpu for c in HONEST if c.kernel_type in ("cuda", "torch_cuda"))


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu-sizes", "gpu-sizes"])
def test_every_honest_request_is_valid(gpu: bool) -> None:
    from kernel_eval_client.models import CompareRequest, EvaluationRequest

    for case in HONEST:
        job = case.build(dummy_target(gpu))
        model = CompareRequest if job.route == "/compare" else EvaluationRequest
        model.model_validate(job.body)
        custom = job.body.get("custom_kernel") or job.body["kernel"]
        assert custom["kernel_type"] == case.kernel_type, case.name
        if custom["kernel_type"] != "cuda":  # Python sources
            compile(custom["source_code"], case.name, "exec")
        assert module_of(case).__doc__, case.name
