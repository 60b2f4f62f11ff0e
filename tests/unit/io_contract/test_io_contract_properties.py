"""Property tests (Hypothesis) of IOContract parsing and of the literal-tensor codec.

Parsing: whatever JSON a client sends, the models either accept it or raise pydantic's
ValidationError (which the API turns into an invalid-request answer), never another exception
(which would be a 500); and what they accept survives the trip through JSON to the worker.
Codec: every tensor, of every dtype and shape, comes back bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from io_contract import DType, IOContract, TensorData, TensorSpec
from io_contract.tensor_utils import encode_tensor, materialize_tensor, torch_dtype

PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# ---- strategies: JSON as a client may send it ----------------------------------------------------

json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8)
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
dtypes = st.sampled_from([d.value for d in DType])
dims = st.integers(-2, 2**33)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a plausible value, sometimes any JSON at all."""
    return st.one_of(strategy, strategy, json_values)


init_dicts = st.fixed_dictionaries(
    {"kind": maybe(st.sampled_from(["randn", "uniform", "zeros", "ones", "full", "arange"]))},
    optional={
        "seed": maybe(st.integers(-1, 2**64)),
        "mean": maybe(st.floats()), "std": maybe(st.floats()),
        "low": maybe(st.floats()), "high": maybe(st.floats()),
        "fill_value": maybe(st.floats()), "start": maybe(st.floats()), "step": maybe(st.floats()),
    },
)  # fmt: skip
data_dicts = st.fixed_dictionaries(
    {"data_b64": maybe(st.binary(max_size=16).map(lambda b: __import__("base64").b64encode(b).decode()))},
    optional={"compression": maybe(st.sampled_from(["none", "zlib"]))},
)
tensor_spec_dicts = st.fixed_dictionaries(
    {"shape": maybe(st.lists(dims, max_size=9))},
    optional={"dtype": maybe(dtypes), "init": maybe(init_dicts), "data": maybe(data_dicts)},
)
dim3_dicts = st.fixed_dictionaries(
    {}, optional={k: maybe(st.integers(-1, 2**32) | st.text(max_size=300)) for k in "xyz"}
)
launch_dicts = st.fixed_dictionaries(
    {},
    optional={
        "grid": maybe(dim3_dicts), "block": maybe(dim3_dicts),
        "num_warps": maybe(st.integers(-1, 64)), "num_stages": maybe(st.integers(-1, 32)),
        "shared_mem_bytes": maybe(st.integers(-1, 2**21)),
    },
)  # fmt: skip
arg_dicts = st.fixed_dictionaries(
    {
        "name": maybe(st.sampled_from(["x", "y", "out", "n", ""])),
        "type": maybe(st.sampled_from(["tensor", "int", "float", "bool"])),
    },
    optional={
        "value": json_scalars,
        "tensor_spec": maybe(tensor_spec_dicts),
        "role": maybe(st.sampled_from(["input", "output", "inout"])),
        "is_meta": maybe(st.booleans()),
    },
)
contract_dicts = st.fixed_dictionaries(
    {"args": maybe(st.lists(arg_dicts, max_size=4))}, optional={"launch": maybe(launch_dicts)}
)


# ---- parsing -------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(data=st.one_of(contract_dicts, json_values))
def test_any_json_is_accepted_or_refused_with_a_validation_error(data: Any) -> None:
    try:
        IOContract.model_validate(data)
    except ValidationError:
        pass


@PROPERTY_SETTINGS
@given(data=contract_dicts)
def test_an_accepted_contract_survives_the_json_trip_to_the_worker(data: Any) -> None:
    try:
        contract = IOContract.model_validate(data)
    except ValidationError:
        return
    again = IOContract.model_validate_json(contract.model_dump_json())
    assert _comparable(again.model_dump()) == _comparable(contract.model_dump())


def test_infinite_and_nan_scalars_survive_the_json_trip() -> None:
    contract = IOContract.model_validate({"args": [
        {"name": "mask", "type": "float", "value": float("-inf")},
        {"name": "x", "type": "tensor",
         "tensor_spec": {"shape": [2], "init": {"kind": "full", "fill_value": float("nan")}}},
    ]})  # fmt: skip
    again = IOContract.model_validate_json(contract.model_dump_json())
    assert again.args[0].value == float("-inf")
    assert again.args[1].tensor_spec is not None and again.args[1].tensor_spec.init is not None
    assert math.isnan(again.args[1].tensor_spec.init.fill_value or 0.0)


@PROPERTY_SETTINGS
@given(data=tensor_spec_dicts)
def test_an_accepted_tensor_spec_is_within_the_limits(data: Any) -> None:
    try:
        spec = TensorSpec.model_validate(data)
    except ValidationError:
        return
    assert len(spec.shape) <= 8 and all(d >= 0 for d in spec.shape)
    assert spec.numel <= 2**32
    if spec.data is not None:
        assert len(spec.data.raw_bytes()) == spec.numel * spec.dtype.itemsize


def _comparable(value: Any) -> Any:
    """``value`` with each NaN replaced by a marker (NaN != NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


# ---- the literal-data codec ----------------------------------------------------------------------

small_shapes = st.lists(st.integers(0, 5), max_size=4)


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    """Any bits at all (NaNs, infinities, subnormals included) of any dtype and small shape."""
    dtype = torch_dtype(DType(draw(dtypes)))
    shape = draw(small_shapes)
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = draw(st.binary(min_size=math.prod(shape) * itemsize, max_size=math.prod(shape) * itemsize))
    if dtype == torch.bool:  # a bool is one byte holding 0 or 1
        raw = bytes(b & 1 for b in raw)
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype and a.shape == b.shape
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )  # fmt: skip


@PROPERTY_SETTINGS
@given(tensor=tensors(), compress=st.booleans())
def test_every_tensor_round_trips_bit_for_bit(tensor: torch.Tensor, compress: bool) -> None:
    spec, _ = encode_tensor(tensor, compress=compress)
    wire = TensorSpec.model_validate_json(spec.model_dump_json())  # as the worker reads it
    assert same_bits(materialize_tensor(wire, "cpu"), tensor)


@PROPERTY_SETTINGS
@given(tensor=tensors().filter(lambda t: t.dim() >= 2 and t.shape[0] > 1))
def test_non_contiguous_tensors_round_trip_too(tensor: torch.Tensor) -> None:
    view = tensor.transpose(0, 1)
    spec, _ = encode_tensor(view)
    assert same_bits(materialize_tensor(spec, "cpu"), view)


@PROPERTY_SETTINGS
@given(raw=st.binary(max_size=4096), compress=st.booleans())
def test_tensor_data_round_trips_any_bytes(raw: bytes, compress: bool) -> None:
    assert TensorData.from_bytes(raw, compress=compress).raw_bytes() == raw


@PROPERTY_SETTINGS
@given(tensor=tensors(), extra=st.integers(1, 3))
def test_data_of_the_wrong_length_is_refused(tensor: torch.Tensor, extra: int) -> None:
    spec, data = encode_tensor(tensor)
    longer = TensorData.from_bytes(data.raw_bytes() + b"\0" * extra)
    with pytest.raises(ValidationError, match="bytes but shape"):
        TensorSpec(shape=spec.shape, dtype=spec.dtype, data=longer)


@PROPERTY_SETTINGS
@given(
    dtype=dtypes, shape=small_shapes, seed=st.integers(0, 2**63 - 1),
    kind=st.sampled_from(["randn", "uniform"]), trial=st.integers(0, 3),
)  # fmt: skip
def test_seeded_tensors_are_reproducible_with_their_shape_and_dtype(
    dtype: str, shape: list[int], seed: int, kind: str, trial: int
) -> None:
    spec = TensorSpec(shape=shape, dtype=DType(dtype), init={"kind": kind, "seed": seed})
    a = materialize_tensor(spec, "cpu", trial=trial)
    b = materialize_tensor(spec, "cpu", trial=trial)
    assert a.shape == tuple(shape) and a.dtype == torch_dtype(DType(dtype))
    assert same_bits(a, b)
