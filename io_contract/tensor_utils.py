"""Turn IOContract specs into tensors, and tensors back into literal data. Worker-side only.

Random tensors are drawn on the CPU from a seeded generator and then moved to the device, so
the same seed gives bit-identical tensors on CPU and GPU alike. Each correctness trial asks
for fresh data through ``trial``: trial 0 uses the spec's own seeds, later trials derive new
ones from them.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

from kernel_eval_client.io_contract import DType, IOContract, TensorData, TensorSpec

if TYPE_CHECKING:
    import torch

_TRIAL_STRIDE = 1_000_003
_SEED_MASK = 2**63 - 1


def torch_dtype(dtype: DType) -> torch.dtype:
    import torch

    return {
        DType.FLOAT64: torch.float64,
        DType.FLOAT32: torch.float32,
        DType.FLOAT16: torch.float16,
        DType.BFLOAT16: torch.bfloat16,
        DType.FLOAT8_E4M3FN: torch.float8_e4m3fn,
        DType.FLOAT8_E4M3FNUZ: torch.float8_e4m3fnuz,
        DType.FLOAT8_E5M2: torch.float8_e5m2,
        DType.FLOAT8_E5M2FNUZ: torch.float8_e5m2fnuz,
        DType.INT64: torch.int64,
        DType.INT32: torch.int32,
        DType.INT16: torch.int16,
        DType.INT8: torch.int8,
        DType.UINT8: torch.uint8,
        DType.BOOL: torch.bool,
    }[dtype]


def default_seed(name: str) -> int:
    """Seed for a random spec that names none: stable, and different for each argument."""
    return zlib.crc32(name.encode())


def trial_seed(seed: int, trial: int, salt: int = 0) -> int:
    """The seed of ``trial`` for a spec seeded ``seed``; ``salt`` (a judge's secret, 0 for the
    request's own seeds) makes it one nobody else can work out."""
    return ((seed + trial * _TRIAL_STRIDE) ^ salt) & _SEED_MASK


def poison_value(dtype: torch.dtype) -> float | int | bool:
    """What an output buffer is filled with before a kernel runs, so unwritten outputs show:
    NaN for every floating dtype, float8 included (each float8 dtype has a NaN)."""
    import torch

    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    info = torch.iinfo(dtype)
    return info.min if info.min < 0 else info.max


def materialize_tensor(
    spec: TensorSpec, device: str | torch.device, *, name: str = "", trial: int = 0,
    salt: int = 0,
) -> torch.Tensor:
    """The tensor ``spec`` describes, on ``device``."""
    import torch

    dtype = torch_dtype(spec.dtype)
    shape = tuple(spec.shape)
    if spec.data is not None:
        raw = bytearray(spec.data.raw_bytes())
        if not raw:
            return torch.empty(shape, dtype=dtype, device=device)
        return torch.frombuffer(raw, dtype=dtype).reshape(shape).to(device)
    init = spec.init
    if init is None:
        return torch.full(shape, poison_value(dtype), dtype=dtype, device=device)
    if init.kind == "zeros":
        return torch.zeros(shape, dtype=dtype, device=device)
    if init.kind == "ones":
        return torch.ones(shape, dtype=dtype, device=device)
    if init.kind == "full":
        return torch.full(shape, init.fill_value, dtype=dtype, device=device)  # type: ignore[arg-type]
    if init.kind == "arange":
        n = spec.numel
        values = init.start + init.step * torch.arange(n, dtype=torch.float64, device="cpu")
        return values.reshape(shape).to(dtype).to(device)

    seed = init.seed if init.seed is not None else default_seed(name)
    gen = torch.Generator(device="cpu").manual_seed(trial_seed(seed, trial, salt))
    work = torch.float64 if dtype == torch.float64 else torch.float32
    if init.kind == "randn":
        values = torch.randn(shape, generator=gen, dtype=work, device="cpu") * init.std + init.mean
        if dtype == torch.bool:
            return (values > init.mean).to(device)
        if not dtype.is_floating_point:
            values = values.round()
    else:  # uniform
        values = torch.rand(shape, generator=gen, dtype=work, device="cpu") * (init.high - init.low) + init.low
        if dtype == torch.bool:
            return (values >= (init.low + init.high) / 2).to(device)
        if not dtype.is_floating_point:
            values = values.floor()
    return drawn_as(values, dtype).to(device)


def is_float8(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1


def drawn_as(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Random ``values`` (drawn in float32 or float64) cast to ``dtype``; for float8 clamped
    to its finite range first (saturated, as FP8 quantisers do): a distribution's tail past
    ±448 (e4m3fn) would otherwise land as NaN or an infinity, and NaN inputs give NaN outputs
    that match any kernel's NaN."""
    if is_float8(dtype):
        import torch

        info = torch.finfo(dtype)
        values = values.clamp(info.min, info.max)
    return values.to(dtype)


def build_call_args(io: IOContract, device: str | torch.device, *, trial: int = 0,
                    salt: int = 0) -> list[Any]:
    """Every argument of ``io`` in order: tensors materialised, scalars as Python values."""
    values: list[Any] = []
    for arg in io.args:
        if arg.type == "tensor":
            assert arg.tensor_spec is not None
            values.append(materialize_tensor(arg.tensor_spec, device, name=arg.name, trial=trial,
                                             salt=salt))
        else:
            values.append(arg.value)
    return values


def encode_tensor(tensor: torch.Tensor, compress: bool = False) -> tuple[TensorSpec, TensorData]:
    """Literal data for ``tensor`` (moved to the CPU, made contiguous)."""
    import torch

    t = tensor.detach().to("cpu").contiguous()
    dtype = next(d for d in DType if torch_dtype(d) == t.dtype)
    # reshape(-1): a 0-dim tensor cannot be viewed as bytes of another size.
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    data = TensorData.from_bytes(raw, compress=compress)
    return TensorSpec(shape=list(t.shape), dtype=dtype, data=data), data
