"""``metadata.robustness``: a correct candidate checked again on inputs unlike its trials'
(a /compare with ``robustness`` on)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class RobustnessCase(BaseModel):
    """One robustness case: the candidate against the reference on inputs unlike the trials'
    (the rules: the server's ``validation/robustness.py``)."""

    name: str  # scale_1e-3, scale_1e3, uniform, outliers, zeros, shapes_1, shapes_2, ...
    kind: Literal["scale", "distribution", "shape"]
    status: Literal["passed", "failed", "skipped"]
    reason: str | None = None  # what was wrong (failed), or why it did not apply (skipped)
    shapes: list[list[int]] | None = None  # a shape case's input tensors' shapes
    atol: float | None = None  # the absolute tolerance applied (the largest, over outputs)
    rtol: float | None = None
    max_abs_error: float | None = None  # over elements finite in both outputs
    max_abs_at: list[int] | None = None  # [output, *index]
    max_rel_error: float | None = None  # |got - expected| / |expected|, where expected != 0
    max_rel_at: list[int] | None = None


class RobustnessReport(BaseModel):
    """The robustness cases of a /compare with ``robustness`` on (``metadata.robustness``).
    They do not change the verdict: ``correctness`` is the trials'."""

    cases: list[RobustnessCase] = Field(default_factory=list)
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    all_passed: bool = True  # no case failed (skipped ones count neither way)
    other_shapes: str = ""  # how many the problem declared, or why none could be run
    spent_ms: float = 0.0

    @classmethod
    def of(cls, cases: list[RobustnessCase], other_shapes: str,
           spent_ms: float = 0.0) -> RobustnessReport:
        """The report of ``cases``, counted."""
        count = {s: sum(c.status == s for c in cases) for s in ("passed", "failed", "skipped")}
        return cls(cases=cases, all_passed=count["failed"] == 0, other_shapes=other_shapes,
                   spent_ms=round(spent_ms, 3), **count)


__all__ = ["RobustnessCase", "RobustnessReport"]
