"""Timing: return a lazy tensor subclass that computes only when someone reads it.

Tries: ``forward`` returns a ``__torch_dispatch__`` wrapper subclass holding the operands;
the timing loop never reads the output, so each timed call costs microseconds, while the
correctness check (which calls ``detach``/``to`` on it) forces the matmul and sees the right
answer.
Caught by: requiring outputs to be plain, materialised tensors (``type(t) is torch.Tensor``
with storage), or a timing that reads/syncs the outputs it times.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
from torch.utils._pytree import tree_map


class Deferred(torch.Tensor):
    @staticmethod
    def __new__(cls, a, b):
        r = torch.Tensor._make_wrapper_subclass(
            cls, (a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device
        )
        r._operands = (a, b)
        r._value = None
        return r

    def _force(self):
        if self._value is None:
            a, b = self._operands
            self._value = a @ b
        return self._value

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t._force() if isinstance(t, Deferred) else t
        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return Deferred(a, b)
"""

CASE = Cheat(
    name="lazy_tensor",
    family=Family.TIMING,
    technique="deferred_result",
    tries="returns a __torch_dispatch__ subclass that runs the matmul only when read",
    caught_by="outputs must be plain materialised tensors; or time until the outputs are read",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
