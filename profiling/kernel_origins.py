"""Where a launched kernel came from, read from its name and the job's source.

A kernel's name, as CUPTI records it, says who compiled it:

========== ===================================================================================
origin     what it is
========== ===================================================================================
own        compiled from this job's source: its ``@triton.jit`` functions, the ``__global__``
           functions of its CUDA (raw, ``load_inline``, CuPy) sources, ``metadata.kernel_name``,
           the kernels its DSL functions compile to (Helion's ``_helion_<fn>``, CuTe DSL's
           ``kernel_cutlass_…``, TileLang's ``<prim_func>_kernel``, cuTile's ``<fn>``), and
           templates of header libraries the source includes (CUTLASS, CuTe, CUB, Thrust)
generated  generated for this job by a compiler from framework code: TorchInductor's
           ``triton_poi_…``/``triton_per_…``/``triton_red_…``/``triton_tem_…`` kernels of a
           ``torch.compile``'d submission. Not the submission's own code (it wrote none of
           it), nor a library's; it does not keep a promise of custom kernels
library    a vendor library: cuBLAS/cuBLASLt, cuDNN, CUTLASS, NCCL, cuFFT, cuRAND, cuSPARSE,
           cuSOLVER, CUB, Thrust, FlashAttention, CuPy's built-in kernels
framework  PyTorch's own kernels (ATen, c10, its bundled flash and memory-efficient attention)
memory     a memory copy or set (not a kernel)
unknown    none of these
========== ===================================================================================

The source's names are matched first: a kernel the submission wrote wins over a pattern it
happens to match. A name in a framework's or library's namespace (``at::``, ``cutlass::``) is
not the submission's by its last component alone, unless the source includes that library's
headers (then it instantiated the template itself). Names are read mangled (``_Z…``, as CUPTI
gives C++ kernels) or demangled.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from enum import Enum

from shared.models import KernelCode, KernelType


class Origin(str, Enum):
    """Who compiled a launched kernel (see the module docstring)."""

    OWN = "own"
    GENERATED = "generated"
    LIBRARY = "library"
    FRAMEWORK = "framework"
    MEMORY = "memory"
    UNKNOWN = "unknown"


ANONYMOUS = "(anonymous namespace)"
# Namespaces of code the submission did not write: a kernel in one is not the submission's
# by its last name alone.
FOREIGN_NAMESPACES = frozenset({
    "at", "c10", "at_cuda_detail", "torch", "pytorch_flash", "cutlass", "cute", "cub",
    "thrust", "cudnn", "cublas", "cublasLt", "flash", "std",
})
# Header libraries whose templates a CUDA source instantiates into kernels of its own.
_INCLUDED = re.compile(r"#\s*include\s*[<\"](cutlass|cute|cub|thrust)/")
_GLOBAL = re.compile(r"\b__global__\b")
# attributes between __global__ and the name that carry parentheses of their own
_ATTRIBUTES = re.compile(r"__(?:launch_bounds|cluster_dims|maxnreg)__\s*\([^)]*\)|"
                         r"__attribute__\s*\(\([^)]*\)\)")
_NOT_NAMES = frozenset({"void", "static", "inline", "extern", "__global__", "__forceinline__",
                        "__noinline__"})
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# Triton kernels were named with their signature before Triton 3 (add_kernel_0d1d2de); TVM
# and others number repeated kernels (main_kernel_1).
_SUFFIX = r"(?:_\d\w*)?"

# Python decorators that make a function a kernel of the source, by resolved dotted name:
# (language, how its launches are named)
_DECORATORS: dict[str, tuple[str, str]] = {
    "triton.jit": ("triton", "{fn}"),
    "triton.language.jit": ("triton", "{fn}"),
    "helion.kernel": ("helion", "prefix:_helion_{fn}"),
    "cutlass.cute.kernel": ("cute_dsl", "prefix:kernel_cutlass_"),
    "tilelang.language.prim_func": ("tilelang", "{fn}_kernel"),
    "tvm.script.tir.prim_func": ("tilelang", "{fn}_kernel"),
    "cuda.tile.kernel": ("cutile", "{fn}"),
    "cupyx.jit.rawkernel": ("cupy", "{fn}"),
}

_GENERATED = re.compile(r"^triton_(?:poi|per|red|tem|for|sca|unk|spl|mm|bmm)_|^triton_.*_fused_")
_NOCASE = re.IGNORECASE
# (pattern, what) in order; searched in the demangled name and the raw one.
_FRAMEWORK = [
    (re.compile(r"\bat::|\bc10::|\bat_cuda_detail::|\btorch::|"
                r"^_ZN2at|^_ZN3c10|^_ZN14at_cuda_detail"), "ATen"),
    (re.compile(r"pytorch_flash::|^_ZN13pytorch_flash"), "PyTorch flash attention"),
    (re.compile(r"PyTorchMemEffAttention|fmha_cutlass"), "PyTorch memory-efficient attention"),
    # ATen kernels defined outside its namespaces
    (re.compile(r"(?:^|[\s:])(?:softmax_warp_(?:forward|backward)|masked_softmax_warp_forward|"
                r"cunn_\w+|gatherTopK|sortKeyValueInplace|kernelPointwiseApply\w*|"
                r"elementwise_kernel_with_index|RowwiseMomentsCUDAKernel|"
                r"ComputeFusedParamsCUDAKernel)\b"), "ATen"),
]
_LIBRARY_SPECIFIC = [
    (re.compile(r"cudnn|xmma_(?:fprop|dgrad|wgrad)|implicit_convolve|precomputed_convolve|"
                r"convolve_sgemm|winograd|^fft2d_", _NOCASE), "cuDNN"),
    (re.compile(r"cublas|cutlass_\d+_(?:tensorop|wmma|simt)|^nvjet|xmma_gemm|"
                r"(?:ampere|volta|turing|maxwell|hopper|blackwell|sm\d{2,3})_\w*gemm|"
                r"gemv2?[NT]?_?kernel|gemvNSP|gemmSN_|gemmk1_kernel|splitKreduce", _NOCASE),
     "cuBLAS"),
    (re.compile(r"nccl", _NOCASE), "NCCL"),
    (re.compile(r"cufft|regular_fft|vector_fft|composite_2way_fft|\bfft_", _NOCASE), "cuFFT"),
    (re.compile(r"curand", _NOCASE), "cuRAND"),
    (re.compile(r"cusparse|csrmv|csrmm", _NOCASE), "cuSPARSE"),
    (re.compile(r"cusolver|getrf|potrf|geqrf", _NOCASE), "cuSOLVER"),
    (re.compile(r"^flash::|flash_fwd|flash_bwd|flashinfer|xformers|transformer_engine", _NOCASE),
     "FlashAttention"),
    (re.compile(r"^cupy_"), "CuPy"),
]
_LIBRARY_GENERIC = [
    (re.compile(r"^(?:\w+ )?cutlass|^(?:\w+ )?cute::|^_ZN7cutlass|^_ZN4cute"), "CUTLASS"),
    (re.compile(r"^(?:\w+ )?cub::|^_ZN3cub"), "CUB"),
    (re.compile(r"^(?:\w+ )?thrust::|^_ZN6thrust"), "Thrust"),
    (re.compile(r"gemm|gemv|xmma", _NOCASE), "cuBLAS"),
    (re.compile(r"cutlass", _NOCASE), "CUTLASS"),
]
# A kernel that computes float32 products in TF32 says so in its name (cuBLAS's and cuDNN's
# xmma and CUTLASS kernels); 3xTF32 kernels emulate float32 precision and are not looser.
_TF32 = re.compile(r"tf32", _NOCASE)
_3XTF32 = re.compile(r"3x_?tf32|tf32x3", _NOCASE)


@dataclass(frozen=True)
class OwnKernels:
    """The kernels a job's source defines, as their launches are named."""

    names: frozenset[str] = frozenset()  # identifiers (a kernel's last name component)
    prefixes: frozenset[str] = frozenset()  # name prefixes of what a DSL compiles
    namespaces: frozenset[str] = frozenset()  # header libraries the source instantiates
    languages: tuple[str, ...] = ()  # the languages that define them

    def __bool__(self) -> bool:
        return bool(self.names or self.prefixes or self.namespaces)

    def listed(self) -> list[str]:
        """What the source defines, for a reader: names, prefixes (``…``) and namespaces."""
        return (sorted(self.names) + sorted(f"{p}…" for p in self.prefixes)
                + sorted(f"{ns}:: (included)" for ns in self.namespaces))


@dataclass
class _Found:
    names: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)
    languages: list[str] = field(default_factory=list)

    def add(self, language: str, rule: str, fn: str) -> None:
        if rule.startswith("prefix:"):
            self.prefixes.add(rule.removeprefix("prefix:").format(fn=fn))
        else:
            self.names.add(rule.format(fn=fn))
        if language not in self.languages:
            self.languages.append(language)


def own_kernels(kernel: KernelCode) -> OwnKernels:
    """The kernels ``kernel``'s source defines, in every language it may hold (a ``torch``
    source may define Triton kernels and build CUDA ones with ``load_inline``)."""
    source = kernel.source_code
    found = _Found()
    for name in cuda_kernel_names(source):
        found.add("cuda", "{fn}", name)
    if kernel.kernel_type != KernelType.CUDA:
        _python_kernels(source, found)
    named = kernel.meta().kernel_name
    if named:
        found.names.add(named)
    namespaces = frozenset(m.group(1) for m in _INCLUDED.finditer(source))
    return OwnKernels(frozenset(found.names), frozenset(found.prefixes), namespaces,
                      tuple(found.languages))


def cuda_kernel_names(source: str) -> list[str]:
    """The ``__global__`` functions of the CUDA code in ``source`` (a ``.cu`` file, or the
    strings of a Python source that builds it), in order."""
    names: list[str] = []
    for match in _GLOBAL.finditer(source):
        rest = _ATTRIBUTES.sub(" ", source[match.end():match.end() + 400])
        head, paren, _ = rest.partition("(")
        if not paren or any(c in head for c in ";{}"):
            continue  # not a declaration (a comment, a macro)
        if head.rstrip().endswith(">"):  # an explicit specialisation: name<args>(...)
            head = head[:head.find("<")]
        words = _IDENTIFIER.findall(head)
        if words and words[-1] not in _NOT_NAMES and words[-1] not in names:
            names.append(words[-1])
    return names


def _python_kernels(source: str, found: _Found) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            dotted = _dotted(target)
            if dotted is None:
                continue
            head, _, tail = dotted.partition(".")
            resolved = aliases.get(head, head) + (f".{tail}" if tail else "")
            if resolved in _DECORATORS:
                found.add(*_DECORATORS[resolved], node.name)


def _dotted(expr: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def qualified_name(name: str, demangled: str | None = None) -> list[str]:
    """The components of a kernel's qualified name (``["at", "native", "reduce_kernel"]``),
    read from its demangled form, else its mangled (Itanium) one, else the name as it is;
    [] when none can be read."""
    if demangled:
        return _demangled_components(demangled)
    if name.startswith("_Z"):
        return _mangled_components(name)
    return _demangled_components(name)


def _demangled_components(name: str) -> list[str]:
    text = name.replace(ANONYMOUS, "{anon}")
    cut = min([i for i in (text.find("<"), text.find("(")) if i >= 0], default=len(text))
    head = text[:cut].split()
    if not head:
        return []
    return [ANONYMOUS if part == "{anon}" else part for part in head[-1].split("::") if part]


def _mangled_components(name: str) -> list[str]:
    i = 3 if name.startswith("_ZL") else 2
    nested = name[i:i + 1] == "N"
    if nested:
        i += 1
        while i < len(name) and name[i] in "rVKRO":
            i += 1
    parts: list[str] = []
    while i < len(name):
        if name[i].isdigit():
            j = i
            while j < len(name) and name[j].isdigit():
                j += 1
            length = int(name[i:j])
            ident = name[j:j + length]
            if len(ident) < length:
                break
            parts.append(ANONYMOUS if ident.startswith("_GLOBAL__N") else ident)
            i = j + length
            if not nested:
                break
        elif name.startswith("St", i):
            parts.append("std")
            i += 2
        else:
            break
    return parts


@dataclass(frozen=True)
class Classified:
    origin: Origin
    source: str  # what it is, in words: "cuBLAS", "ATen", "the source's add_kernel"


def classify(name: str, own: OwnKernels, demangled: str | None = None,
             kind: str = "kernel") -> Classified:
    """Where a launch named ``name`` came from (see the module docstring)."""
    if kind != "kernel":
        return Classified(Origin.MEMORY, "a memory copy" if kind == "memcpy" else "a memory set")
    parts = qualified_name(name, demangled)
    shown = demangled or name
    last = parts[-1] if parts else name
    outer = parts[0] if len(parts) > 1 else None
    foreign = outer in FOREIGN_NAMESPACES and outer not in own.namespaces
    if not foreign:
        for candidate in own.names:
            if last == candidate or re.fullmatch(re.escape(candidate) + _SUFFIX, last):
                return Classified(Origin.OWN, f"the source's {candidate}")
    for prefix in own.prefixes:
        if name.startswith(prefix):
            return Classified(Origin.OWN, f"the source's {prefix}… kernel")
    for pattern, what in _FRAMEWORK:
        if pattern.search(shown) or pattern.search(name):
            return Classified(Origin.FRAMEWORK, what)
    for pattern, what in _LIBRARY_SPECIFIC:
        if pattern.search(shown) or pattern.search(name):
            return Classified(Origin.LIBRARY, what)
    if outer is not None and outer in own.namespaces:
        return Classified(Origin.OWN, f"the source's instantiation of {outer}:: templates")
    if _GENERATED.search(last):
        return Classified(Origin.GENERATED, "TorchInductor (torch.compile)")
    for pattern, what in _LIBRARY_GENERIC:
        if pattern.search(shown) or pattern.search(name):
            return Classified(Origin.LIBRARY, what)
    return Classified(Origin.UNKNOWN, "not recognised")


def computes_in_tf32(name: str, demangled: str | None = None) -> bool:
    """Whether a kernel's name says it multiplies float32 values in TF32."""
    text = f"{name} {demangled or ''}"
    return bool(_TF32.search(text)) and not _3XTF32.search(text)
