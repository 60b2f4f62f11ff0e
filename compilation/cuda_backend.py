"""Raw CUDA C++ kernels: compiled with NVRTC (through CuPy) or nvcc, launched from the IOContract.

The source's ``__global__`` kernels are found by a small parser, which also reads the
chosen kernel's parameter list, so that the IOContract can be checked against it (count,
pointer vs scalar, element type) and every scalar passed with the C type the kernel declares
(``int`` as int32, ``long``/``int64_t``/``size_t`` as int64, ``double`` as float64, ...).
Tensors are passed as their device pointers. The launch uses ``launch.grid``/``launch.block``
and ``launch.shared_mem_bytes`` as dynamic shared memory, on torch's current CUDA stream.

``metadata.backend``: ``"nvrtc"`` (default) compiles with ``cupy.RawModule(code=...)`` and
finds C++ kernels by name expression, so both ``extern "C"`` and plain ``__global__ void
k(...)`` work; ``"nvcc"`` runs ``nvcc -cubin`` for this GPU's arch and looks the kernel up
among the cubin's symbols. ``metadata.return_artifacts`` adds ``ptx`` (and ``sass`` where
``cuobjdump`` is installed) to the kernel's artifacts.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from kernel_eval_client.io_contract import ArgSpec, Dim3, DType, IOContract

from compilation.base import Arguments, CompileContext, CompileError
from compilation.grid_expr import GridExpr, GridExprError
from shared.models import KernelCode

CPU_MODE_MESSAGE = "kernel_type 'cuda' needs a CUDA GPU; this server runs in CPU mode"
NVCC_TIMEOUT_S = 300
MAX_LOG_LINES = 60

_C_SCALARS: dict[str, type[np.generic]] = {
    **dict.fromkeys(["bool"], np.bool_),
    **dict.fromkeys(["char", "signed char", "int8_t"], np.int8),
    **dict.fromkeys(["unsigned char", "uint8_t"], np.uint8),
    **dict.fromkeys(["short", "short int", "signed short", "int16_t"], np.int16),
    **dict.fromkeys(["unsigned short", "unsigned short int", "uint16_t"], np.uint16),
    **dict.fromkeys(["int", "signed", "signed int", "int32_t"], np.int32),
    **dict.fromkeys(["unsigned", "unsigned int", "uint32_t"], np.uint32),
    **dict.fromkeys(["long", "long int", "long long", "long long int", "int64_t", "ssize_t",
                     "ptrdiff_t", "intptr_t"], np.int64),
    **dict.fromkeys(["unsigned long", "unsigned long int", "unsigned long long",
                     "unsigned long long int", "uint64_t", "size_t", "uintptr_t"], np.uint64),
    **dict.fromkeys(["half", "__half"], np.float16),
    **dict.fromkeys(["float"], np.float32),
    **dict.fromkeys(["double"], np.float64),
}
_BYTE_TYPES = {"char", "signed char", "unsigned char", "int8_t", "uint8_t"}  # raw byte access
_QUALIFIERS = re.compile(
    r"\b(?:const|volatile|__restrict__|__restrict|restrict|__grid_constant__|struct)\b|\bstd::"
)
_TYPE_WORDS = {"int", "long", "short", "char", "float", "double", "bool", "unsigned", "signed"}
_ATTRIBUTES = {"__launch_bounds__", "__attribute__", "__declspec", "alignas", "__cluster_dims__",
               "__maxnreg__"}
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', re.DOTALL)


@dataclass(frozen=True)
class CudaParam:
    name: str
    type: str  # qualifiers dropped, e.g. "float*", "unsigned int", "int64_t"
    is_pointer: bool


@dataclass(frozen=True)
class CudaKernelDecl:
    name: str
    params: list[CudaParam]


def find_kernels(source: str) -> list[CudaKernelDecl]:
    """The ``__global__`` functions of ``source``, in order, with their parameter lists."""
    text = _COMMENT_OR_STRING.sub(lambda m: m[0] if m[0].startswith('"') else
                                  re.sub(r"[^\n]", " ", m[0]), source)
    found: dict[str, CudaKernelDecl] = {}
    for match in re.finditer(r"\b__global__\b", text):
        name, paren = _declared_name(text, match.end())
        if name is None:
            continue
        close = _matching_paren(text, paren)
        found.setdefault(name, CudaKernelDecl(name, parse_params(text[paren + 1:close])))
    return list(found.values())


def _declared_name(text: str, start: int) -> tuple[str | None, int]:
    """The function name after ``__global__`` at ``start``, and where its '(' is."""
    while True:
        paren = text.find("(", start)
        if paren < 0:
            return None, -1
        head = text[start:paren]
        ident = re.search(r"([A-Za-z_]\w*)\s*$", head)
        if re.search(r"[;{}#]", head) or ident is None:
            return None, -1  # not a function declaration (a macro, say)
        if ident[1] not in _ATTRIBUTES:
            return ident[1], paren
        start = _matching_paren(text, paren) + 1  # skip __launch_bounds__(...) and the like


def _matching_paren(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text)


def parse_params(text: str) -> list[CudaParam]:
    """Parse a C++ parameter list such as ``const float* __restrict__ a, int64_t n``."""
    pieces, depth, current = [], 0, ""
    for ch in text:
        depth += {"(": 1, "<": 1, "[": 1, ")": -1, ">": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            pieces.append(current)
            current = ""
        else:
            current += ch
    pieces.append(current)
    params = []
    for piece in (p.split("=")[0].strip() for p in pieces):
        if not piece or piece == "void":
            continue
        is_array = piece.endswith("]")
        piece = re.sub(r"\[[^\]]*\]\s*$", "", piece).strip()
        ident = re.search(r"([A-Za-z_]\w*)\s*$", piece)
        named = ident and ident[1] not in _TYPE_WORDS and piece[: ident.start()].strip()
        name = ident[1] if named and ident else ""
        ctype = piece[: ident.start()] if name and ident else piece
        ctype = " ".join(_QUALIFIERS.sub(" ", ctype).split())
        ctype = re.sub(r"\s*([*&])\s*", r"\1", ctype)
        params.append(CudaParam(name, ctype, is_array or "*" in ctype or "&" in ctype))
    return params


def scalar_ctype(param: CudaParam | None, arg: ArgSpec) -> type[np.generic]:
    """The numpy type a scalar argument is passed as: the C type the kernel declares for it."""
    ctype = _C_SCALARS.get(param.type) if param is not None else None
    if ctype is None:  # an unknown typedef or template parameter: go by the IOContract type
        ctype = {"int": np.int32, "float": np.float32, "bool": np.bool_}[arg.type]
    if np.issubdtype(ctype, np.integer):
        where = f"parameter '{param.name}' ({param.type})" if param else "an integer parameter"
        if arg.type == "float":
            raise CompileError(f"IOContract argument '{arg.name}' is a float but {where} is not")
        info = np.iinfo(ctype)  # type: ignore[type-var]
        if not info.min <= int(arg.value) <= info.max:  # type: ignore[arg-type]
            raise CompileError(f"IOContract argument '{arg.name}' = {arg.value} does not fit "
                               f"{where}")
    return ctype


@dataclass
class LaunchPlan:
    """Everything about a launch that can be decided without a GPU."""

    kernel_name: str
    ctypes: list[type[np.generic] | None]  # per argument; None for tensors
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int


def plan_launch(source: str, io: IOContract, kernel_name: str | None) -> LaunchPlan:
    """Choose the kernel and check the IOContract against its parameters and launch limits."""
    kernels = find_kernels(source)
    listed = ", ".join(k.name for k in kernels)
    decl: CudaKernelDecl | None
    if kernel_name:
        base = re.sub(r"<.*$", "", kernel_name).split("::")[-1].strip()
        decl = next((k for k in kernels if k.name == base), None)
        if decl is None and kernels:
            raise CompileError(f"kernel_name '{kernel_name}' is not a __global__ function of the "
                               f"source; it defines: {listed}")
    elif len(kernels) == 1:
        decl, kernel_name = kernels[0], kernels[0].name
    elif not kernels:
        raise CompileError("no __global__ kernel found in the source")
    else:
        raise CompileError(f"the source defines several __global__ kernels ({listed}); say "
                           "which one to launch with metadata.kernel_name")
    params: list[CudaParam | None] = list(decl.params) if decl else [None] * len(io.args)
    if len(params) != len(io.args):
        signature = ", ".join(f"{p.type} {p.name}" for p in decl.params) if decl else ""
        raise CompileError(f"kernel '{kernel_name}' takes {len(params)} parameters ({signature}) "
                           f"but the IOContract has {len(io.args)} args")
    ctypes: list[type[np.generic] | None] = []
    for param, arg in zip(params, io.args):
        if param is not None and param.is_pointer != (arg.type == "tensor"):
            what = "a tensor" if arg.type == "tensor" else f"a scalar ({arg.type})"
            raise CompileError(f"kernel parameter '{param.type} {param.name}' is "
                               f"{'a pointer' if param.is_pointer else 'a scalar'} but IOContract "
                               f"argument '{arg.name}' is {what}")
        if arg.type == "tensor":
            _check_element_type(param, arg)
            ctypes.append(None)
        else:
            ctypes.append(scalar_ctype(param, arg))
    launch = io.launch
    if launch is None or launch.block is None or launch.grid is None:
        raise CompileError("cuda kernels need launch.grid and launch.block in the IOContract, "
                           'e.g. "launch": {"grid": {"x": 16}, "block": {"x": 256}}')
    names = {a.name: a.value for a in io.args if a.type == "int"}
    names.update({p.name: a.value for p, a in zip(params, io.args) if p and a.type == "int"})
    grid, block = _dims(launch.grid, names, "grid"), _dims(launch.block, names, "block")
    if block[0] * block[1] * block[2] > 1024 or block[2] > 64:
        raise CompileError(f"launch.block {block} exceeds the 1024 threads (and z <= 64) a block "
                           "may have")
    if grid[1] > 65535 or grid[2] > 65535:
        raise CompileError(f"launch.grid {grid}: y and z may be at most 65535")
    return LaunchPlan(kernel_name, ctypes, grid, block, launch.shared_mem_bytes)


def _check_element_type(param: CudaParam | None, arg: ArgSpec) -> None:
    pointee = param.type.rstrip("*&") if param else ""
    ctype = _C_SCALARS.get(pointee)
    if param is None or ctype is None or pointee in _BYTE_TYPES or arg.tensor_spec is None:
        return
    dtype = arg.tensor_spec.dtype
    kind = "f" if dtype.is_floating else "b" if dtype == DType.BOOL else "i"
    want = np.dtype(ctype)
    if want.itemsize != dtype.itemsize or want.kind.replace("u", "i") != kind:
        raise CompileError(f"kernel parameter '{param.type} {param.name}' points to {pointee} "
                           f"but IOContract tensor '{arg.name}' is {dtype.value}")


def _dims(dim: Dim3, names: dict[str, Any], what: str) -> tuple[int, int, int]:
    out = []
    for value in (dim.x, dim.y, dim.z):
        try:
            out.append(value if isinstance(value, int) else GridExpr(value)(names))
        except GridExprError as exc:
            raise CompileError(f"launch.{what}: {exc}") from exc
        if out[-1] < 1:
            raise CompileError(f"launch.{what} evaluates to {out[-1]}; dimensions must be >= 1")
    return out[0], out[1], out[2]


# ---- compilers ------------------------------------------------------------------------------


def find_cuda_tool(name: str) -> str | None:
    """``name`` (nvcc, cuobjdump, ...) on PATH or in the CUDA toolkit directory."""
    found = shutil.which(name)
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and (Path(base) / "bin" / name).is_file():
            return str(Path(base) / "bin" / name)
    return None


def tidy_log(log: str) -> str:
    """A compiler log with temporary file paths shown as ``kernel.cu``, cut to a readable size."""
    lines = re.sub(r'[^\s"()]*\.cu\b', "kernel.cu", log).rstrip().splitlines()
    if len(lines) > MAX_LOG_LINES:
        lines = lines[:MAX_LOG_LINES] + [f"... ({len(lines) - MAX_LOG_LINES} more lines)"]
    return "\n".join(lines)


def _has_arch(options: tuple[str, ...]) -> bool:
    return any(o.startswith(("-arch", "--gpu-architecture", "-gencode", "--generate-code",
                             "-code")) for o in options)


def nvrtc_compile(source: str, options: tuple[str, ...], name: str, target: str) -> bytes:
    """PTX (``target`` ``compute_XX``) or cubin (``sm_XX``) of ``source``, as CuPy compiles it."""
    from cupy_backends.cuda.libs import nvrtc

    flags = options + ("-ftz=true", "--device-as-default-execution-space")  # CuPy's defaults
    if not _has_arch(options):
        flags += (f"-arch={target}",)
    program = nvrtc.createProgram(source, "kernel.cu", (), ())
    try:
        nvrtc.addNameExpression(program, name)
        try:
            nvrtc.compileProgram(program, flags)
        except nvrtc.NVRTCError as exc:
            raise CompileError("NVRTC compilation failed:\n"
                               + tidy_log(nvrtc.getProgramLog(program))) from exc
        return nvrtc.getPTX(program) if target.startswith("compute") else nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)


def nvcc_compile(source: str, options: tuple[str, ...], arch: str, work_dir: Path,
                 output: str = "cubin") -> Path:
    """Run ``nvcc -cubin`` (or ``-ptx``) for ``sm_<arch>``; the output file's path."""
    nvcc = find_cuda_tool("nvcc")
    if nvcc is None:
        raise CompileError("nvcc is not installed on this server; use the default NVRTC backend")
    work_dir.mkdir(parents=True, exist_ok=True)
    src, out = work_dir / "kernel.cu", work_dir / f"kernel.{output}"
    src.write_text(source)
    arch_flags = [] if _has_arch(options) else [f"-arch=sm_{arch}"]
    cmd = [nvcc, f"-{output}", *arch_flags, *options, "-o", str(out), str(src)]
    try:
        done = subprocess.run(cmd, cwd=work_dir, capture_output=True, text=True, check=False,
                              timeout=NVCC_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CompileError(f"nvcc took longer than {NVCC_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        raise CompileError("nvcc compilation failed:\n" + tidy_log(done.stderr + done.stdout))
    return out


def cubin_kernel_names(cubin: bytes) -> list[str]:
    """The (mangled) names of the kernels in a 64-bit ELF cubin, from its section names."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        return []
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx]
    names = cubin[strtab[4]:strtab[4] + strtab[5]]
    sections = [names[h[0]:names.index(b"\0", h[0])].decode() for h in headers]
    prefix = ".nv.info."  # one per kernel; device functions have none
    return [s[len(prefix):] for s in sections if s.startswith(prefix)]


def match_symbol(kernel_name: str, symbols: list[str]) -> str:
    """The symbol of ``kernel_name`` (``extern "C"`` or Itanium-mangled, ``ns::`` allowed)."""
    if kernel_name in symbols:
        return kernel_name
    parts = [p.strip() for p in re.sub(r"<.*$", "", kernel_name).split("::") if p.strip()]
    encoded = "".join(f"{len(p)}{p}" for p in parts)
    prefix = f"_ZN{encoded}" if len(parts) > 1 else f"_Z{encoded}"
    matches = [s for s in symbols if s.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    what = "several kernels match" if matches else "no kernel matches"
    raise CompileError(f"{what} kernel_name '{kernel_name}' in the nvcc output; its kernels: "
                       f"{', '.join(matches or symbols) or 'none'}")


def _sass(cubin: Path) -> str | None:
    tool = find_cuda_tool("cuobjdump")
    if tool is None:
        return None
    done = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True,
                          timeout=60, check=False)
    return done.stdout if done.returncode == 0 else None


# ---- backend ----------------------------------------------------------------------------------


def _import_cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise CompileError("CuPy is not installed on this server (pip install cupy-cuda13x, or "
                           "cupy-cuda12x, to match its CUDA)") from exc
    return cupy


class CudaBackend:
    def compile(self, kernel: KernelCode, ctx: CompileContext) -> CudaKernel:
        if ctx.device != "cuda":
            raise CompileError(CPU_MODE_MESSAGE)
        if kernel.io is None:
            raise CompileError("cuda kernels need an IOContract: its args are the kernel's "
                               "parameters in order, and its launch gives grid and block")
        meta = kernel.meta()
        plan = plan_launch(kernel.source_code, kernel.io, meta.kernel_name)
        cupy = _import_cupy()
        from cupy.cuda.compiler import CompileException, JitifyException

        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}{minor}"
        options = tuple(meta.compiler_options or ())
        artifacts: dict[str, str] = {}
        source = kernel.source_code
        try:
            if meta.backend == "nvcc":
                build_dir = ctx.work_dir / f"nvcc_{ctx.role}"  # a job's ref and custom apart
                cubin = nvcc_compile(source, options, arch, build_dir)
                symbol = match_symbol(plan.kernel_name, cubin_kernel_names(cubin.read_bytes()))
                function = cupy.RawModule(path=str(cubin)).get_function(symbol)
                if meta.return_artifacts:
                    artifacts["ptx"] = nvcc_compile(source, options, arch, build_dir,
                                                    "ptx").read_text()
                    sass = _sass(cubin)
                    if sass:
                        artifacts["sass"] = sass
            else:
                module = cupy.RawModule(code=source, options=options, jitify=bool(meta.jitify),
                                        name_expressions=[plan.kernel_name])
                function = module.get_function(plan.kernel_name)
                if meta.return_artifacts:
                    artifacts["ptx"] = nvrtc_compile(source, options, plan.kernel_name,
                                                     f"compute_{arch}").decode()
            if plan.shared_mem > 48 * 1024:  # more than the default needs an explicit opt-in
                function.max_dynamic_shared_size_bytes = plan.shared_mem
        except (CompileException, JitifyException) as exc:
            raise CompileError("NVRTC compilation failed:\n" + tidy_log(str(exc))) from exc
        except cupy.cuda.driver.CUDADriverError as exc:
            raise CompileError(f"loading kernel '{plan.kernel_name}' failed: {exc}") from exc
        return CudaKernel(function, plan, kernel.io, artifacts)


class CudaKernel:
    def __init__(self, function: Any, plan: LaunchPlan, io: IOContract,
                 artifacts: dict[str, str]) -> None:
        self.function = function
        self.plan = plan
        self.io = io
        self.artifacts = artifacts
        self._convert: list[Callable[[Any], Any] | None] = list(plan.ctypes)

    def make_inputs(self, trial: int, salt: int = 0) -> Arguments:
        return Arguments.from_io(self.io, "cuda", trial, salt)

    def run(self, args: Arguments) -> list[torch.Tensor]:
        self.prepare(args)()
        return args.output_tensors()

    def prepared_outputs(self, result: Any, args: Arguments) -> list[torch.Tensor]:
        return args.output_tensors()  # a launch writes its output arguments

    def prepare(self, args: Arguments) -> Callable[[], None]:
        """The bare launch on ``args``, for timing: arguments are converted once."""
        import cupy

        values = []
        for value, convert in zip(args.values, self._convert):
            if isinstance(value, torch.Tensor):
                if not value.is_cuda:
                    raise ValueError(f"a tensor argument is on {value.device}, not on the GPU")
                values.append(np.uint64(value.data_ptr()))  # pointer-sized, by value
            else:
                values.append(convert(value) if convert else value)
        packed, device = tuple(values), torch.cuda.current_device()
        grid, block, shared_mem = self.plan.grid, self.plan.block, self.plan.shared_mem

        def launch() -> None:
            # torch's stream at call time: a CUDA-graph capture runs on a stream of its own
            stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream, device)
            with cupy.cuda.Device(device), stream:
                self.function(grid, block, packed, shared_mem=shared_mem)

        return launch
