"""Compare a kernel in each kernel language the server runs (CuTe DSL, TileLang, Helion, cuTile)
with its torch reference, and its wrong twin: the right one passes, the wrong one does not.

    python client/examples/kernel_languages.py [SERVER_URL]

A GPU server with the languages installed (``pip install '.[dsl]'``, or the GPU Docker image);
``kernel-eval health`` lists which run there and why the others do not. The kernels are in
``dsl_kernels/``, one module per language.
"""

from __future__ import annotations

import sys
from types import ModuleType

from dsl_kernels import cute_dsl_add, cutile_add, helion_add, tilelang_add
from kernel_eval_client import (
    IOContractBuilder,
    KernelCode,
    KernelEvalClient,
    KernelType,
    create_randn_spec,
)

REFERENCE = """
import torch

class Model(torch.nn.Module):
    def forward(self, a, b):
        return a + b
"""
N = 1 << 20  # a multiple of every example's block
EXAMPLES: dict[str, ModuleType] = {
    "cute_dsl": cute_dsl_add, "tilelang": tilelang_add, "helion": helion_add,
    "cutile": cutile_add,
}


def main(server_url: str | None) -> int:
    io = (IOContractBuilder()
          .add_input_tensor("a", create_randn_spec([N], seed=1))
          .add_input_tensor("b", create_randn_spec([N], seed=2))
          .build())
    ref = KernelCode(source_code=REFERENCE, kernel_type=KernelType.TORCH, io=io)
    failures = 0
    with KernelEvalClient(server_url) as client:
        for language in client.health().languages:
            if not language.available:
                print(f"{language.name}: not on this server ({language.reason})")
                continue
            example = EXAMPLES[language.name]
            # the right one must pass, its wrong twin must be found incorrect
            for twin, source, expected in (("correct", example.CORRECT, "success"),
                                           ("wrong", example.WRONG, "incorrect")):
                custom = KernelCode(source_code=source, kernel_type=KernelType.TORCH, io=io)
                response = client.compare(ref, custom, num_trials=30, num_correct_trials=3)
                result = response.kernel_exec_result
                assert result is not None, response.error
                why = result.validation_error or result.compilation_error or result.runtime_error
                timing = f", {result.runtime:.4f} ms" if result.runtime else ""
                # what its JIT compiled in this job (0 when an earlier job's caches came back)
                caches = (result.metadata or {}).get("jit_cache")
                compiled = f", compiled {caches['new_files']} file(s)" if caches else ""
                print(f"{language.name} {language.version} {twin}: {result.outcome.value}"
                      f"{timing}{compiled}{f' ({why[:120]})' if why else ''}")
                failures += result.outcome.value != expected
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
