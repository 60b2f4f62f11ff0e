"""Honest torch, /evaluate: one kernel timed on its own must not be flagged either."""

from tests.adversarial.corpus import Honest, Job, Target, evaluate, io, model, tensor, torch_kernel

SOURCE = model("torch.relu(x)")


def build(target: Target) -> Job:
    return evaluate(torch_kernel(SOURCE, io(tensor("x", [1 << 16], 15))), trials=10)


CASE = Honest("torch_evaluate_relu", "torch", "/evaluate of relu", build)
