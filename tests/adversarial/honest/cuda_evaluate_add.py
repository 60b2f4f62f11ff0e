"""Honest CUDA (GPU), /evaluate: the vector add timed on its own."""

from tests.adversarial.corpus import Honest, Job, Target, evaluate, kernel
from tests.adversarial.honest.cuda_add import SOURCE, contract


def build(target: Target) -> Job:
    return evaluate(kernel("cuda", SOURCE, contract(1 << 20), kernel_name="add"), trials=20)


CASE = Honest("cuda_evaluate_add", "cuda", "/evaluate of a vector add", build, gpu=True)
