"""IOContract models, spec builders, tensor generation and the literal-data codec."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from io_contract import (
    ArgSpec,
    IOContract,
    IOContractBuilder,
    TensorData,
    TensorSpec,
    create_arange_spec,
    create_full_spec,
    create_ones_spec,
    create_randn_spec,
    create_uniform_spec,
    create_zeros_spec,
)
from io_contract.tensor_utils import build_call_args, encode_tensor, materialize_tensor


def test_same_seed_gives_bit_identical_tensors() -> None:
    spec = create_randn_spec([64, 33], seed=7)
    a = materialize_tensor(spec, "cpu")
    b = materialize_tensor(spec, "cpu")
    assert torch.equal(a, b)
    assert not torch.equal(a, materialize_tensor(create_randn_spec([64, 33], seed=8), "cpu"))


@pytest.mark.gpu
def test_same_seed_is_identical_on_cpu_and_gpu() -> None:
    for dtype in ("float32", "bfloat16", "int32"):
        spec = create_uniform_spec([1000], dtype=dtype, seed=3, low=-5, high=5)
        assert torch.equal(materialize_tensor(spec, "cpu"), materialize_tensor(spec, "cuda").cpu())


def test_trials_draw_fresh_data_but_trial_zero_is_the_spec() -> None:
    spec = create_randn_spec([128], seed=1)
    t0 = materialize_tensor(spec, "cpu", trial=0)
    t1 = materialize_tensor(spec, "cpu", trial=1)
    assert not torch.equal(t0, t1)
    assert torch.equal(t0, materialize_tensor(spec, "cpu"))


def test_unseeded_random_args_differ_by_name() -> None:
    spec = TensorSpec(shape=[16], init={"kind": "randn"})
    assert not torch.equal(
        materialize_tensor(spec, "cpu", name="x"), materialize_tensor(spec, "cpu", name="y")
    )


def test_init_kinds() -> None:
    assert torch.equal(materialize_tensor(create_zeros_spec([3]), "cpu"), torch.zeros(3))
    assert torch.equal(materialize_tensor(create_ones_spec([3], "int8"), "cpu"), torch.ones(3, dtype=torch.int8))
    assert torch.equal(materialize_tensor(create_full_spec([2], 2.5), "cpu"), torch.full((2,), 2.5))
    arange = materialize_tensor(create_arange_spec([2, 3], start=1, step=2), "cpu")
    assert arange.tolist() == [[1, 3, 5], [7, 9, 11]]
    u = materialize_tensor(create_uniform_spec([10000], seed=0, low=2, high=3), "cpu")
    assert 2 <= u.min() and u.max() < 3
    n = materialize_tensor(create_randn_spec([20000], seed=0, mean=5, std=0.5), "cpu")
    assert abs(n.mean().item() - 5) < 0.05 and abs(n.std().item() - 0.5) < 0.05


def test_output_buffers_are_poisoned() -> None:
    assert torch.isnan(materialize_tensor(TensorSpec(shape=[4]), "cpu")).all()
    ints = materialize_tensor(TensorSpec(shape=[4], dtype="int32"), "cpu")
    assert (ints == torch.iinfo(torch.int32).min).all()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int64", "uint8", "bool"])
@pytest.mark.parametrize("compress", [False, True])
def test_literal_data_roundtrip(dtype: str, compress: bool) -> None:
    original = materialize_tensor(create_uniform_spec([5, 7], dtype=dtype, seed=2, low=-3, high=3), "cpu")
    spec, _ = encode_tensor(original, compress=compress)
    spec = TensorSpec.model_validate_json(spec.model_dump_json())
    assert torch.equal(materialize_tensor(spec, "cpu"), original)


def test_literal_data_size_must_fit_the_shape() -> None:
    data = TensorData.from_bytes(b"\0" * 12)
    with pytest.raises(ValidationError, match="needs 16"):
        TensorSpec(shape=[4], dtype="float32", data=data)
    with pytest.raises(ValidationError, match="base64"):
        TensorSpec(shape=[1], dtype="float32", data=TensorData(data_b64="***"))


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ({"name": "x", "type": "tensor"}, "needs a tensor_spec"),
        ({"name": "n", "type": "int"}, "needs a value"),
        ({"name": "n", "type": "int", "value": 1.5}, "non-integer"),
        ({"name": "b", "type": "bool", "value": 1}, "true or false"),
        ({"name": "n", "type": "int", "value": 3, "role": "output"}, "only have role 'input'"),
        ({"name": "x", "type": "tensor", "tensor_spec": {"shape": [-1]}}, "negative"),
        ({"name": "x", "type": "tensor", "tensor_spec": {"shape": [2**20, 2**20]}}, "more than"),
        ({"name": "x", "type": "tensor", "tensor_spec": {"shape": [4], "init": {"kind": "uniform", "low": 1, "high": 0}}}, "low < high"),
        ({"name": "x", "type": "tensor", "tensor_spec": {"shape": [4], "init": {"kind": "full"}}}, "fill_value"),
    ],
)
def test_invalid_args_are_rejected_with_a_reason(arg: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ArgSpec.model_validate(arg)


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValidationError, match="appears twice"):
        IOContract(args=[ArgSpec(name="n", type="int", value=1), ArgSpec(name="n", type="int", value=2)])


def test_builder_builds_what_the_api_guide_shows() -> None:
    io = (
        IOContractBuilder()
        .add_input_tensor("x", create_randn_spec([1024, 512], seed=42))
        .add_output_tensor("y", [1024, 512], "float32")
        .add_scalar("alpha", "float", 2.0)
        .add_meta_param("BLOCK_SIZE", 256)
        .set_grid(32)
        .set_block(256)
        .set_num_warps(4)
        .build()
    )
    assert [a.name for a in io.args] == ["x", "y", "alpha", "BLOCK_SIZE"]
    assert [a.role for a in io.args] == ["input", "output", "input", "input"]
    assert io.args[3].is_meta
    assert io.launch is not None and io.launch.grid.x == 32 and io.launch.block.x == 256
    assert io.launch.num_warps == 4
    assert IOContract.model_validate_json(io.model_dump_json()) == io


def test_build_call_args_keeps_order_and_scalars() -> None:
    io = (
        IOContractBuilder()
        .add_input_tensor("x", create_ones_spec([2]))
        .add_scalar("n", "int", 2)
        .add_output_tensor("y", [2])
        .build()
    )
    x, n, y = build_call_args(io, "cpu")
    assert torch.equal(x, torch.ones(2)) and n == 2 and torch.isnan(y).all()


FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]


@pytest.mark.parametrize("dtype", FLOAT8)
def test_a_float8_tensor_spec_generates_float8_inputs_of_its_distribution(dtype: str) -> None:
    torch_dtype = getattr(torch, dtype)
    spec = create_uniform_spec([4096], dtype=dtype, seed=3, low=-2, high=2)
    u = materialize_tensor(spec, "cpu")
    assert u.dtype == torch_dtype and torch.equal(u.view(torch.uint8),
                                                  materialize_tensor(spec, "cpu").view(torch.uint8))
    assert -2 <= u.float().min() and u.float().max() <= 2 and u.float().std() > 1
    n = materialize_tensor(create_randn_spec([20000], dtype=dtype, seed=0, mean=3), "cpu").float()
    assert abs(n.mean().item() - 3) < 0.1 and abs(n.std().item() - 1) < 0.1
    # a tail beyond the dtype's range saturates: no NaN or infinity among the inputs
    wide = materialize_tensor(create_randn_spec([4096], dtype=dtype, seed=1, std=1e5), "cpu")
    assert torch.isfinite(wide.float()).all()
    assert wide.float().abs().max() == torch.finfo(torch_dtype).max
    assert materialize_tensor(create_full_spec([3], 1.5, dtype), "cpu").float().tolist() == [1.5] * 3
    assert materialize_tensor(create_arange_spec([3], dtype, start=-1), "cpu").float().tolist() == \
        [-1.0, 0.0, 1.0]
    assert torch.isnan(materialize_tensor(TensorSpec(shape=[4], dtype=dtype), "cpu").float()).all()


@pytest.mark.parametrize("dtype", FLOAT8)
def test_an_iocontract_with_float8_tensors_is_accepted_and_built(dtype: str) -> None:
    io = IOContract.model_validate_json(
        IOContractBuilder()
        .add_input_tensor("a", shape=[16, 32], dtype=dtype, init_kind="randn", seed=1)
        .add_inout_tensor("acc", shape=[16], dtype=dtype, init_kind="zeros")
        .add_output_tensor("y", [16], dtype)
        .build().model_dump_json())
    values = build_call_args(io, "cpu")
    assert [v.dtype for v in values] == [getattr(torch, dtype)] * 3
    assert io.args[0].tensor_spec is not None and io.args[0].tensor_spec.dtype.itemsize == 1
    spec, _ = encode_tensor(values[0])
    assert spec.dtype.value == dtype
    again = materialize_tensor(TensorSpec.model_validate_json(spec.model_dump_json()), "cpu")
    assert torch.equal(again.view(torch.uint8), values[0].view(torch.uint8))
