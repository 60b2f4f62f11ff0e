"""Verdict: find the server's own output comparison in ``sys.modules`` and disarm it.

Tries: in every loaded module of the server's packages, functions whose names say they
compare or check outputs (``compare_outputs``, ``compare_tensor``, ``inputs_changed``,
``check_outputs``, …) are replaced by ones that report no problem; the kernel returns
zeros.
Caught by: comparing outputs in a process that never imported user code.
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
import sys

_PACKAGES = ("validation", "subprocess_worker", "profiling", "compilation", "orchestration",
             "shared", "worker", "checker")
_NAMES = ("compare_outputs", "compare_tensor", "inputs_changed", "check_outputs",
          "check_output", "outputs_match", "recheck_outputs")

patched = []
for _name, _module in list(sys.modules.items()):
    if _module is None or _name.split(".")[0] not in _PACKAGES:
        continue
    for _attr in _NAMES:
        if callable(getattr(_module, _attr, None)):
            setattr(_module, _attr, lambda *args, **kwargs: None)
            patched.append(f"{_name}.{_attr}")
print("disarmed:", ", ".join(patched))


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.zeros(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="patched_server_compare",
    family=Family.VERDICT,
    technique="patched_comparison",
    tries="replaces the server's compare_outputs/compare_tensor/... found in sys.modules",
    caught_by="output comparison outside the kernel's process",
    build=build,
)
