"""IOContract: the explicit description of a kernel's arguments and launch.

These are wire models: the server validates requests with them, the worker reads them from
its job file, and the client builds them. They import nothing but pydantic and the standard
library, so the client stays light.

An :class:`IOContract` is a list of :class:`ArgSpec` (tensors, ints, floats, bools, each an
``input``, ``output`` or ``inout``) plus an optional :class:`LaunchConfig`. Tensors are
described by a :class:`TensorSpec`: a shape, a dtype and either a seeded initialiser
(:class:`TensorInit`) or literal data (:class:`TensorData`, base64, optionally zlib).
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ._request_model import RequestModel

# A tensor larger than this (elements) is refused at the door: it cannot be meant.
MAX_TENSOR_ELEMENTS = 2**32
MAX_TENSOR_RANK = 8


class DType(str, Enum):
    """Tensor element types an IOContract may name."""

    FLOAT64 = "float64"
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT8_E4M3FN = "float8_e4m3fn"
    FLOAT8_E4M3FNUZ = "float8_e4m3fnuz"
    FLOAT8_E5M2 = "float8_e5m2"
    FLOAT8_E5M2FNUZ = "float8_e5m2fnuz"
    INT64 = "int64"
    INT32 = "int32"
    INT16 = "int16"
    INT8 = "int8"
    UINT8 = "uint8"
    BOOL = "bool"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def is_floating(self) -> bool:
        return self in (DType.FLOAT64, DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16) \
            or self.value.startswith("float8_")


_ITEMSIZE = {
    DType.FLOAT64: 8,
    DType.FLOAT32: 4,
    DType.FLOAT16: 2,
    DType.BFLOAT16: 2,
    DType.FLOAT8_E4M3FN: 1,
    DType.FLOAT8_E4M3FNUZ: 1,
    DType.FLOAT8_E5M2: 1,
    DType.FLOAT8_E5M2FNUZ: 1,
    DType.INT64: 8,
    DType.INT32: 4,
    DType.INT16: 2,
    DType.INT8: 1,
    DType.UINT8: 1,
    DType.BOOL: 1,
}

InitKind = Literal["randn", "uniform", "zeros", "ones", "full", "arange"]


class TensorInit(RequestModel):
    """How to fill a tensor. The same ``seed`` always gives bit-identical data."""

    kind: InitKind = "randn"
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    mean: float = 0.0
    std: float = Field(default=1.0, ge=0.0)
    low: float = 0.0
    high: float = 1.0
    fill_value: float | None = None
    start: float = 0.0
    step: float = 1.0

    @model_validator(mode="after")
    def _check_parameters(self) -> TensorInit:
        if self.kind == "uniform" and not self.low < self.high:
            raise ValueError(f"uniform init needs low < high, got low={self.low} high={self.high}")
        if self.kind == "full" and self.fill_value is None:
            raise ValueError("full init needs fill_value")
        if self.kind == "arange" and self.step == 0:
            raise ValueError("arange init needs a non-zero step")
        return self


class TensorData(RequestModel):
    """Literal tensor contents: the raw little-endian bytes, base64-encoded, optionally zlib'd."""

    data_b64: str
    compression: Literal["none", "zlib"] = "none"

    def raw_bytes(self) -> bytes:
        try:
            raw = base64.b64decode(self.data_b64, validate=True)
        except ValueError as exc:
            raise ValueError(f"data_b64 is not valid base64: {exc}") from exc
        if self.compression == "zlib":
            try:
                raw = zlib.decompress(raw)
            except zlib.error as exc:
                raise ValueError(f"data_b64 is not valid zlib data: {exc}") from exc
        return raw

    @classmethod
    def from_bytes(cls, raw: bytes, compress: bool = False) -> TensorData:
        if compress:
            return cls(data_b64=base64.b64encode(zlib.compress(raw)).decode(), compression="zlib")
        return cls(data_b64=base64.b64encode(raw).decode())


class TensorSpec(RequestModel):
    """Shape, dtype and contents of one tensor argument.

    Contents come from ``data`` (literal) or ``init``; with neither, the tensor is an output
    buffer (filled with NaN, or a sentinel for integer types, before the kernel runs), which an
    argument of role ``input`` or ``inout`` may not be.
    """

    shape: list[int]
    dtype: DType = DType.FLOAT32
    init: TensorInit | None = None
    data: TensorData | None = None

    @field_validator("shape")
    @classmethod
    def _check_shape(cls, shape: list[int]) -> list[int]:
        if len(shape) > MAX_TENSOR_RANK:
            raise ValueError(f"rank {len(shape)} exceeds the maximum of {MAX_TENSOR_RANK}")
        if any(d < 0 for d in shape):
            raise ValueError(f"shape {shape} has a negative dimension")
        if math.prod(shape) > MAX_TENSOR_ELEMENTS:
            raise ValueError(
                f"shape {shape} has {math.prod(shape)} elements, more than the "
                f"{MAX_TENSOR_ELEMENTS} one tensor may have"
            )
        return shape

    @model_validator(mode="after")
    def _check_data(self) -> TensorSpec:
        if self.data is not None:
            if self.init is not None:
                raise ValueError("give either init or data, not both")
            expected = math.prod(self.shape) * self.dtype.itemsize
            got = len(self.data.raw_bytes())
            if got != expected:
                raise ValueError(
                    f"data holds {got} bytes but shape {self.shape} of {self.dtype.value} "
                    f"needs {expected}"
                )
        return self

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


ArgType = Literal["tensor", "int", "float", "bool"]
Role = Literal["input", "output", "inout"]


class ArgSpec(RequestModel):
    """One kernel argument, in call order."""

    name: str = Field(min_length=1, max_length=128)
    type: ArgType
    value: int | float | bool | None = None
    tensor_spec: TensorSpec | None = None
    role: Role = "input"
    is_meta: bool = False  # Triton compile-time constant (tl.constexpr)

    @model_validator(mode="after")
    def _check_kind(self) -> ArgSpec:
        if self.type == "tensor":
            if self.tensor_spec is None:
                raise ValueError(f"tensor argument '{self.name}' needs a tensor_spec")
            if self.value is not None:
                raise ValueError(f"tensor argument '{self.name}' takes a tensor_spec, not a value")
            if self.is_meta:
                raise ValueError(f"tensor argument '{self.name}' cannot be is_meta")
            spec = self.tensor_spec
            if self.role != "output" and spec.init is None and spec.data is None:
                # it would be filled like an output buffer (NaN), the reference's outputs would
                # be NaN too, and any kernel that returns NaN would match them
                raise ValueError(
                    f"{self.role} tensor '{self.name}' has neither init nor data, so its values "
                    "would be NaN and a comparison would check nothing: give it an init, e.g. "
                    '{"kind": "randn"} (or {"kind": "zeros"} for a workspace)')
        else:
            if self.value is None:
                raise ValueError(f"{self.type} argument '{self.name}' needs a value")
            if self.tensor_spec is not None:
                raise ValueError(f"scalar argument '{self.name}' takes a value, not a tensor_spec")
            if self.role != "input":
                raise ValueError(f"scalar argument '{self.name}' can only have role 'input'")
            self.value = _coerce_scalar(self.name, self.type, self.value)
        return self


def _coerce_scalar(name: str, kind: str, value: float | bool) -> int | float | bool:
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"bool argument '{name}' needs true or false, got {value!r}")
        return value
    if isinstance(value, bool):
        raise ValueError(f"{kind} argument '{name}' got a boolean")  # noqa: TRY004 - pydantic reports ValueError
    if kind == "int":
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"int argument '{name}' got non-integer {value!r}")
        return int(value)
    return float(value)


# A grid dimension is a number, or (for autotuned Triton kernels) an expression over the
# kernel's meta-parameters and integer arguments, e.g. "cdiv(n_elements, BLOCK_SIZE)".
GridDim = int | str


class Dim3(RequestModel):
    """A grid or block shape; each dimension a number or a grid expression."""

    x: GridDim = 1
    y: GridDim = 1
    z: GridDim = 1

    @field_validator("x", "y", "z")
    @classmethod
    def _check_dim(cls, v: GridDim) -> GridDim:
        if isinstance(v, int) and not 1 <= v <= 2**31 - 1:
            raise ValueError(f"launch dimension {v} is out of range 1..2^31-1")
        if isinstance(v, str) and not 0 < len(v) <= 256:
            raise ValueError("a launch dimension expression must be 1..256 characters")
        return v


class LaunchConfig(RequestModel):
    """Grid/block for CUDA kernels; grid, num_warps, num_stages for Triton kernels."""

    grid: Dim3 | None = None
    block: Dim3 | None = None
    num_warps: int | None = Field(default=None, ge=1, le=32)
    num_stages: int | None = Field(default=None, ge=1, le=16)
    shared_mem_bytes: int = Field(default=0, ge=0, le=2**20)


class IOContract(RequestModel):
    """A kernel's arguments, in call order, and how to launch it."""

    args: list[ArgSpec] = Field(default_factory=list, max_length=256)
    launch: LaunchConfig | None = None

    @field_validator("args")
    @classmethod
    def _unique_names(cls, args: list[ArgSpec]) -> list[ArgSpec]:
        seen: set[str] = set()
        for arg in args:
            if arg.name in seen:
                raise ValueError(f"argument name '{arg.name}' appears twice")
            seen.add(arg.name)
        return args

    def tensor_args(self) -> list[ArgSpec]:
        return [a for a in self.args if a.type == "tensor"]

    def output_args(self) -> list[ArgSpec]:
        return [a for a in self.args if a.type == "tensor" and a.role in ("output", "inout")]


# ---- spec builders ------------------------------------------------------------------------


def create_randn_spec(
    shape: list[int], dtype: str = "float32", seed: int | None = None, mean: float = 0.0,
    std: float = 1.0,
) -> TensorSpec:
    """A tensor of normal samples."""
    return TensorSpec(
        shape=list(shape), dtype=DType(dtype),
        init=TensorInit(kind="randn", seed=seed, mean=mean, std=std),
    )


def create_uniform_spec(
    shape: list[int], dtype: str = "float32", seed: int | None = None, low: float = 0.0,
    high: float = 1.0,
) -> TensorSpec:
    """A tensor of uniform samples in ``[low, high)``."""
    return TensorSpec(
        shape=list(shape), dtype=DType(dtype),
        init=TensorInit(kind="uniform", seed=seed, low=low, high=high),
    )


def create_zeros_spec(shape: list[int], dtype: str = "float32") -> TensorSpec:
    """A tensor of zeros."""
    return TensorSpec(shape=list(shape), dtype=DType(dtype), init=TensorInit(kind="zeros"))


def create_ones_spec(shape: list[int], dtype: str = "float32") -> TensorSpec:
    """A tensor of ones."""
    return TensorSpec(shape=list(shape), dtype=DType(dtype), init=TensorInit(kind="ones"))


def create_full_spec(shape: list[int], fill_value: float, dtype: str = "float32") -> TensorSpec:
    """A tensor filled with ``fill_value``."""
    return TensorSpec(
        shape=list(shape), dtype=DType(dtype),
        init=TensorInit(kind="full", fill_value=fill_value),
    )


def create_arange_spec(
    shape: list[int], dtype: str = "float32", start: float = 0.0, step: float = 1.0
) -> TensorSpec:
    """``start, start + step, …`` laid out in row-major order over ``shape``."""
    return TensorSpec(
        shape=list(shape), dtype=DType(dtype),
        init=TensorInit(kind="arange", start=start, step=step),
    )


class IOContractBuilder:
    """Fluent construction of an :class:`IOContract`, in either of the documented styles.

    With spec builders (the API guide)::

        io = (IOContractBuilder()
              .add_input_tensor("x", create_randn_spec([1024], seed=1))
              .add_output_tensor("y", [1024], "float32")
              .add_scalar("n", "int", 1024)
              .set_grid(4).set_block(256)
              .build())

    With keywords (the architecture guide)::

        io = (IOContractBuilder()
              .add_input_tensor("x", shape=[1024], dtype="float32", init_kind="randn")
              .add_output_tensor("y", shape=[1024], dtype="float32")
              .add_meta_param("BLOCK_SIZE", value=256)
              .set_launch_config(grid=(4, 1, 1), num_warps=4)
              .build())
    """

    def __init__(self) -> None:
        self._args: list[ArgSpec] = []
        self._launch: dict[str, Any] = {}

    def add_input_tensor(
        self,
        name: str,
        spec: TensorSpec | None = None,
        *,
        shape: list[int] | None = None,
        dtype: str = "float32",
        init_kind: InitKind = "randn",
        seed: int | None = None,
        **init_params: float,
    ) -> IOContractBuilder:
        """An input tensor: a ``spec``, or ``shape``/``dtype`` and an ``init_kind`` with its
        parameters (``seed``, ``mean``, ``std``, ``low``, ``high``, ``fill_value``, ``start``,
        ``step``)."""
        spec = _tensor_spec(name, spec, shape, dtype, init_kind, seed, init_params)
        self._args.append(ArgSpec(name=name, type="tensor", tensor_spec=spec, role="input"))
        return self

    def add_output_tensor(
        self, name: str, shape: list[int], dtype: str = "float32"
    ) -> IOContractBuilder:
        spec = TensorSpec(shape=list(shape), dtype=DType(dtype))
        self._args.append(ArgSpec(name=name, type="tensor", tensor_spec=spec, role="output"))
        return self

    def add_inout_tensor(
        self,
        name: str,
        spec: TensorSpec | None = None,
        *,
        shape: list[int] | None = None,
        dtype: str = "float32",
        init_kind: InitKind = "randn",
        seed: int | None = None,
        **init_params: float,
    ) -> IOContractBuilder:
        """A tensor the kernel reads and writes; described as for :meth:`add_input_tensor`."""
        spec = _tensor_spec(name, spec, shape, dtype, init_kind, seed, init_params)
        self._args.append(ArgSpec(name=name, type="tensor", tensor_spec=spec, role="inout"))
        return self

    def add_scalar(
        self, name: str, type: Literal["int", "float", "bool"], value: float | bool
    ) -> IOContractBuilder:
        self._args.append(ArgSpec(name=name, type=type, value=value))
        return self

    def add_meta_param(self, name: str, value: int | bool) -> IOContractBuilder:
        kind: Literal["int", "bool"] = "bool" if isinstance(value, bool) else "int"
        self._args.append(ArgSpec(name=name, type=kind, value=value, is_meta=True))
        return self

    def set_grid(self, x: GridDim, y: GridDim = 1, z: GridDim = 1) -> IOContractBuilder:
        self._launch["grid"] = Dim3(x=x, y=y, z=z)
        return self

    def set_block(self, x: int, y: int = 1, z: int = 1) -> IOContractBuilder:
        self._launch["block"] = Dim3(x=x, y=y, z=z)
        return self

    def set_num_warps(self, num_warps: int) -> IOContractBuilder:
        self._launch["num_warps"] = num_warps
        return self

    def set_num_stages(self, num_stages: int) -> IOContractBuilder:
        self._launch["num_stages"] = num_stages
        return self

    def set_shared_mem(self, nbytes: int) -> IOContractBuilder:
        self._launch["shared_mem_bytes"] = nbytes
        return self

    def set_launch_config(
        self,
        grid: LaunchDims | None = None,
        block: LaunchDims | None = None,
        num_warps: int | None = None,
        num_stages: int | None = None,
        shared_mem_bytes: int | None = None,
    ) -> IOContractBuilder:
        """Set several launch settings at once; ``grid`` and ``block`` may be a number, an
        ``(x, y, z)`` sequence of up to three, or a mapping with ``x``, ``y``, ``z``."""
        settings = {
            "grid": None if grid is None else _dim3(grid, "grid"),
            "block": None if block is None else _dim3(block, "block"),
            "num_warps": num_warps,
            "num_stages": num_stages,
            "shared_mem_bytes": shared_mem_bytes,
        }
        self._launch.update({k: v for k, v in settings.items() if v is not None})
        return self

    def build(self) -> IOContract:
        launch = LaunchConfig(**self._launch) if self._launch else None
        return IOContract(args=list(self._args), launch=launch)


# A launch shape as the builder takes it: 4, (4, 2), (4, 2, 1), {"x": 4}, or a Dim3.
LaunchDims = GridDim | Sequence[GridDim] | Mapping[str, GridDim] | Dim3


def _dim3(dims: LaunchDims, what: str) -> Dim3:
    if isinstance(dims, Dim3):
        return dims
    if isinstance(dims, (int, str)):
        return Dim3(x=dims)
    if isinstance(dims, Mapping):
        return Dim3.model_validate(dict(dims))
    values = list(dims)
    if not 1 <= len(values) <= 3:
        raise ValueError(f"{what} takes one to three dimensions (x, y, z), got {values!r}")
    return Dim3(**dict(zip("xyz", values)))


def _tensor_spec(
    name: str,
    spec: TensorSpec | None,
    shape: list[int] | None,
    dtype: str,
    init_kind: InitKind,
    seed: int | None,
    init_params: Mapping[str, float],
) -> TensorSpec:
    if spec is not None:
        if shape is not None or init_params:
            raise TypeError(f"tensor '{name}': give a TensorSpec or shape=..., not both")
        return spec
    if shape is None:
        raise TypeError(f"tensor '{name}' needs a TensorSpec or shape=[...]")
    unknown = sorted(set(init_params) - set(TensorInit.model_fields))
    if unknown:
        raise TypeError(f"tensor '{name}': unknown init parameter(s) {', '.join(unknown)}")
    init = TensorInit.model_validate({"kind": init_kind, "seed": seed, **init_params})
    return TensorSpec(shape=list(shape), dtype=DType(dtype), init=init)
