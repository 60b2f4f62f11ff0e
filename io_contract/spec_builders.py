"""Helpers that build TensorSpecs and whole IOContracts (defined with the wire models)."""

from kernel_eval_client.io_contract import (
    IOContractBuilder,
    create_arange_spec,
    create_full_spec,
    create_ones_spec,
    create_randn_spec,
    create_uniform_spec,
    create_zeros_spec,
)

__all__ = [
    "IOContractBuilder",
    "create_arange_spec",
    "create_full_spec",
    "create_ones_spec",
    "create_randn_spec",
    "create_uniform_spec",
    "create_zeros_spec",
]
