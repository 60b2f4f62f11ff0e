"""Honest torch: a float16 matmul computed in float32 and rounded once to float16.

More accurate than the float16 reference, and so different from it by float16 rounding: an
error check tight enough to catch tolerance exploitation must still pass this. On a CPU without
native float16 matrix units the float16 reference is an order of magnitude slower than this
float32 kernel (15-19x on the development machine): a true speedup there, so its bound on the
speedup applies on a GPU only.
"""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("a @ b", "a, b")
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a.float(), b.float()).half()
"""


def build(target: Target) -> Job:
    contract = io(tensor("a", [128, 256], 61, dtype="float16"),
                  tensor("b", [256, 128], 62, dtype="float16"))
    return compare(torch_kernel(REF, contract), torch_kernel(CUSTOM))


CASE = Honest("torch_fp16_matmul_fp32_accumulate", "torch",
              "float16 matmul accumulated in float32", build,
              features=("reference_slow_on_cpu",))
