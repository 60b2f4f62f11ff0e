"""IOContractBuilder in both documented styles: spec builders (API guide) and keywords
(architecture guide) build the same contract."""

from __future__ import annotations

import pytest
from kernel_eval_client import (
    Dim3,
    IOContractBuilder,
    create_arange_spec,
    create_randn_spec,
    create_uniform_spec,
)


def test_keyword_and_spec_styles_build_the_same_input_tensor() -> None:
    by_spec = IOContractBuilder().add_input_tensor(
        "x", create_uniform_spec([8, 4], "float16", seed=3, low=-1.0, high=1.0)
    )
    by_keywords = IOContractBuilder().add_input_tensor(
        "x", shape=[8, 4], dtype="float16", init_kind="uniform", seed=3, low=-1.0, high=1.0
    )
    assert by_keywords.build() == by_spec.build()


def test_keyword_style_defaults_to_float32_randn() -> None:
    arg = IOContractBuilder().add_input_tensor("x", shape=[16]).build().args[0]
    assert arg.tensor_spec is not None
    assert arg.tensor_spec == create_randn_spec([16])
    assert arg.role == "input"


def test_inout_tensor_in_keyword_style() -> None:
    arg = (
        IOContractBuilder()
        .add_inout_tensor("acc", shape=[6], init_kind="arange", start=1.0, step=2.0)
        .build()
        .args[0]
    )
    assert arg.role == "inout" and arg.tensor_spec == create_arange_spec([6], start=1.0, step=2.0)


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        (4, Dim3(x=4)),
        ((4,), Dim3(x=4)),
        ((4, 2, 3), Dim3(x=4, y=2, z=3)),
        ([4, 2], Dim3(x=4, y=2)),
        ({"x": 4, "y": 2}, Dim3(x=4, y=2)),
        ("cdiv(n, BLOCK)", Dim3(x="cdiv(n, BLOCK)")),
    ],
)
def test_set_launch_config_takes_the_documented_grid_shapes(grid: object, expected: Dim3) -> None:
    io = IOContractBuilder().set_launch_config(grid=grid, num_warps=8).build()  # type: ignore[arg-type]
    assert io.launch is not None
    assert io.launch.grid == expected and io.launch.num_warps == 8 and io.launch.block is None


def test_set_launch_config_keeps_what_earlier_calls_set() -> None:
    io = IOContractBuilder().set_block(256).set_launch_config(grid=(16, 1, 1)).build()
    assert io.launch is not None
    assert io.launch.block == Dim3(x=256) and io.launch.grid == Dim3(x=16)


def test_a_grid_of_four_dimensions_is_refused() -> None:
    with pytest.raises(ValueError, match="one to three dimensions"):
        IOContractBuilder().set_launch_config(grid=(1, 2, 3, 4))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs a TensorSpec or shape"),
        ({"spec": create_randn_spec([4]), "shape": [4]}, "not both"),
        ({"shape": [4], "sed": 3}, "unknown init parameter.*sed"),
    ],
)
def test_tensor_arguments_that_cannot_be_meant_are_type_errors(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        IOContractBuilder().add_input_tensor("x", **kwargs)  # type: ignore[arg-type]
