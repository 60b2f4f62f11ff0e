"""Honest Triton, /evaluate: the vector add timed on its own."""

from tests.adversarial.corpus import Honest, Job, Target, evaluate, kernel
from tests.adversarial.honest.triton_add import SOURCE, contract


def build(target: Target) -> Job:
    return evaluate(kernel("triton", SOURCE, contract(2048, 512)), trials=5)


CASE = Honest("triton_evaluate_add", "triton", "/evaluate of a vector add", build)
