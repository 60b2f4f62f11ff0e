"""The client's reading of a CUDA source's kernel names agrees with the cuda backend's parser.

A request is refused when its cuda source has several ``__global__`` kernels and names none;
that check runs where torch is not imported, so it has its own reader. If the two ever read a
source differently, a runnable request could be refused, or a doomed one queued.
"""

from __future__ import annotations

import pytest
from kernel_eval_client._cuda_source import cuda_kernel_names

from compilation.cuda_backend import find_kernels

SOURCES = {
    "one": "__global__ void vector_add(float* a, float* b, float* c, int n) { c[0] = a[0]; }",
    "several": """
#include <cstdint>
// __global__ void in_a_comment(int x)
template <typename T>
__global__ void scale(T* x, T factor, int64_t n) { }
extern "C" __global__ void __launch_bounds__(256, 2)
fill(float* __restrict__ out, const double value, size_t n) { }
namespace ns {
__global__ void inner(const float* a, float b[], unsigned int n, bool flag) { }
}
__global__ void declared_only(long long n);
/* __global__ void in_a_block_comment(float* y) */
#define LAUNCHER __global__
""",
    "declared then defined": "__global__ void k(int n);\n__global__ void k(int n) { }\n",
    "a string mentions one": 'const char* s = "__global__ void fake(int)";\n__global__ void real(int n) {}',
    "attribute with nested parens": (
        "__global__ void __attribute__((noinline)) first(int n) {}\n"
        "__global__ __launch_bounds__(MAX(128, 64)) void second(int n) {}\n"
    ),
    "none": "__device__ float helper(float x) { return x; }",
}


@pytest.mark.parametrize("name", SOURCES)
def test_names_agree_with_the_cuda_backend(name: str) -> None:
    source = SOURCES[name]
    assert cuda_kernel_names(source) == [k.name for k in find_kernels(source)]


def test_names_of_the_several_kernels_source() -> None:
    assert cuda_kernel_names(SOURCES["several"]) == ["scale", "fill", "inner", "declared_only"]
