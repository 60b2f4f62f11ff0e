"""A result's metadata as the client reads it: typed fields, values by key as in the JSON,
only what the server set sent back, and keys from a newer server kept."""

from __future__ import annotations

import json

import pytest
from kernel_eval_client import KernelExecResult, ResourceUse, ResultMetadata

SENT = {
    "device": "cpu", "gpu_id": None, "gpu_type": None, "speedup": 1.5,
    "resources": {"peak_memory_bytes": 9, "peak_shared_bytes": 0, "device_free_bytes": None,
                  "device_total_bytes": None, "input_bytes": 64, "output_bytes": 32},
    "worker_calls": {"custom.trials": {"calls": 2, "ms": 3.5}},
    "from_a_newer_server": {"x": 1},
}


def test_the_metadata_reads_back_exactly_what_was_sent() -> None:
    result = KernelExecResult.model_validate({"outcome": "success", "metadata": SENT})
    assert json.loads(result.model_dump_json())["metadata"] == SENT
    # a None the server set stays, even where the caller drops nulls elsewhere
    assert result.model_dump(exclude_none=True)["metadata"]["gpu_type"] is None


def test_values_read_by_key_as_the_json_carries_them_and_by_attribute_typed() -> None:
    meta = KernelExecResult.model_validate({"metadata": SENT}).metadata
    assert meta["speedup"] == 1.5 and meta.get("speedup") == 1.5
    assert meta["resources"] == SENT["resources"]  # a block is a dict, read by key
    assert isinstance(meta.resources, ResourceUse) and meta.resources.input_bytes == 64
    assert meta["worker_calls"]["custom.trials"]["ms"] == 3.5
    assert meta["from_a_newer_server"] == {"x": 1}
    assert "gpu_type" in meta and "memory_retry" not in meta
    assert meta.get("memory_retry") is None and meta.get("memory_retry", "none") == "none"
    with pytest.raises(KeyError):
        meta["memory_retry"]


def test_fields_left_unset_are_not_sent() -> None:
    meta = ResultMetadata()
    meta.speedup = None
    meta.reference_reused = True
    assert json.loads(meta.model_dump_json()) == {"speedup": None, "reference_reused": True}
    assert json.loads(KernelExecResult().model_dump_json())["metadata"] == {}
