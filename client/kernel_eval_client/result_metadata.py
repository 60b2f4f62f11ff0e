"""``KernelExecResult.metadata``: what a result says beside its verdict and its number.

Every key the server writes is a field of :class:`ResultMetadata`, and a block with fixed keys
is a model of its own. A result carries only the fields that apply to it: a field the server
did not set is left out of the JSON, while one it set to ``null`` (``gpu_type`` in CPU mode,
``device_metrics`` when none were asked for) is sent as ``null``.

Reading by key, as from the JSON, works too: ``result.metadata["speedup"]``,
``result.metadata.get("resources")`` and ``"memory_retry" in result.metadata`` give the value
as the JSON carries it (a block as a ``dict``); attribute access gives the typed value. Keys a
newer server sends that this client does not know are kept and read the same way.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer
from pydantic_core import to_jsonable_python

from .robustness import RobustnessReport
from .speed_of_light import SpeedOfLight


class MetadataBlock(BaseModel):
    """Base of the metadata's models: only the fields that were set are sent, unknown keys
    are kept, and values can be read by key as from the JSON."""

    # A client reads what a newer server sends: keys it does not know are kept, not dropped.
    model_config = ConfigDict(extra="allow")

    # No return annotation: pydantic would take it for the JSON schema and the API's
    # documentation would lose the fields.
    @model_serializer(mode="plain")
    def _as_sent(self):
        """The fields that were set, in declaration order, then any unknown keys; a ``None``
        that was set stays (callers' ``exclude_none`` never reaches inside)."""
        sent = {name: getattr(self, name) for name in type(self).model_fields
                if name in self.model_fields_set}
        sent.update(self.__pydantic_extra__ or {})
        return sent

    def __contains__(self, key: object) -> bool:
        return key in self.model_fields_set

    def __getitem__(self, key: str) -> Any:
        if key not in self.model_fields_set:
            raise KeyError(key)
        return to_jsonable_python(getattr(self, key))

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` as the JSON carries it, or ``default`` where it is absent."""
        if key not in self.model_fields_set:
            return default
        return self[key]


class ResourceUse(MetadataBlock):
    """Memory a kernel's process used (bytes), and the problem's size."""

    peak_memory_bytes: int = 0  # torch's allocator's peak
    peak_shared_bytes: int = 0  # memory exported to the judge, outside torch's allocator
    device_free_bytes: int | None = None  # the GPU's free memory when measured (null on CPU)
    device_total_bytes: int | None = None  # the GPU's memory (null on CPU)
    input_bytes: int = 0  # the problem's inputs
    output_bytes: int = 0  # its outputs


class TimedSampleAudit(MetadataBlock):
    """The judge's check of timed samples' outputs, picked after they ran (/compare)."""

    audited: bool = False  # whether any sample was checked
    checked: list[int] = Field(default_factory=list)  # the indices of the samples checked
    samples: int = 0  # samples taken
    wrong_sample: int | None = None  # the first sample whose outputs were wrong
    reason: str | None = None  # why none could be checked
    expected: bool | None = None  # that follows from the reference (not reproducible, stateful)


class JudgeCalibration(MetadataBlock):
    """Which measurement of the hand-over's null call judged a candidate (/compare)."""

    kept: bool = False  # an earlier pairing's measurement, kept by the judge
    taken_by_job: str = ""  # the job whose pairing measured it
    age_ms: float = 0.0  # how old it was
    not_kept: str | None = None  # why the judge's last one did not serve


class ReferenceNote(MetadataBlock):
    """The reference figure a candidate is measured against (/compare)."""

    reused: bool = False  # taken by another job (this run, or stored)
    timed_by_job: str = ""  # the job that timed it


class JitCache(MetadataBlock):
    """What the JIT compilers' caches did for a source (kept per source across jobs)."""

    restored: bool = False  # an earlier job's caches were handed over before the import
    files: int = 0  # files in the caches after the job
    new_files: int = 0  # files the job compiled (0 after a restore: it compiled nothing)
    new_file_names: list[str] = Field(default_factory=list)  # the first few, relative paths
    kept_bytes: int = 0  # bytes filed for later jobs of the source


class DeviceMetrics(MetadataBlock):
    """Nsight Compute's metrics in the API guide's layout, or why there are none."""

    # the kernel's (for /compare, the reference's); in the server's profiling layout
    original_device_metrics: dict[str, Any] | None = None
    custom_device_metrics: dict[str, Any] | None = None  # /compare: the candidate's
    available: bool | None = None  # false: none were collected (``reason`` says why)
    reason: str | None = None  # why none were collected
    device: str | None = None  # the device of a job that was not profiled


class WorkerCalls(MetadataBlock):
    """The server's wall time of one kind of worker request, summed."""

    calls: int = 0  # requests of this kind
    ms: float = 0.0  # their server wall time, in all


class RayPlacement(MetadataBlock):
    """Where a job ran on a Ray cluster (``EXECUTOR=ray``)."""

    node_id: str = ""  # Ray's id of the node
    address: str = ""  # the node's IP address
    attempts: int = 1  # runs it took (a lost node's job runs again)


class ResultMetadata(MetadataBlock):
    """What a result says beside its verdict (see the module docstring)."""

    # ---- where it ran
    device: Literal["cuda", "cpu"] | None = None  # where its kernel ran
    gpu_id: int | None = None  # the physical GPU (null in CPU mode)
    gpu_type: str | None = None  # the GPU's name (null in CPU mode)
    timing_note: str | None = None  # CPU mode: what its timings are
    device_metrics: DeviceMetrics | None = None  # when asked for (null when not)
    artifacts: dict[str, str] | None = None  # PTX, SASS, ... where the request asked for them
    # ---- what it made (/evaluate, /validate): each output's dtype and shape ("float32[1024]")
    outputs: list[str] | None = None
    # ---- its timing
    timing_figures: dict[str, Any] | None = None  # each figure, with its regime and method
    gpu_state: dict[str, Any] | None = None  # the GPU's clocks, power and limits while timed
    # ---- its process
    work_queues: int | None = None  # its CUDA context's hardware work queues
    worker_warmed: str | None = None  # the libraries it warmed beside its context
    worker_rehearsed: str | None = None  # the harness's paths it rehearsed: "all" or "alone"
    resources: ResourceUse | None = None  # the memory its process held, the problem's size
    # ---- a comparison's candidate
    correctness_trials: int | None = None  # trials run, each on fresh inputs
    tensor_transfer: Literal["gpu", "host"] | None = None  # where the two processes' tensors met
    arena_bytes: int | None = None  # the memory both processes mapped
    arena_reused: bool | None = None  # an arena kept from a pairing that is gone
    timed_sample_audit: TimedSampleAudit | None = None  # the check of timed samples' outputs
    # the judge's wall time by step of the trials and the audit (a diagnostic)
    judge_spent_ms: dict[str, float] | None = None
    judge_calibration: JudgeCalibration | None = None  # which null call measurement judged it
    speedup: float | None = None  # the reference's median over the candidate's
    speedup_statistic: str | None = None  # the statistic the speedup divides ("median")
    reference_reused: bool | None = None  # as ``reference.reused``
    reference: ReferenceNote | None = None  # the reference figure it is measured against
    robustness: RobustnessReport | None = None  # cases beyond the trials, when asked for
    # ---- what ran, and how close to the hardware's limit
    speed_of_light: SpeedOfLight | None = None
    # the kernels one more call launched, by origin (own, library, framework, ...), and the
    # math modes it ran under: the server's profiling/provenance.py says each key
    provenance: dict[str, Any] | None = None
    precision_parity: dict[str, Any] | None = None  # each side's math modes; what was looser
    # ---- a comparison's reference
    reused: bool | None = None  # its figure was taken by another job
    timed_by_job: str | None = None  # the job that timed it
    # ---- how the job went
    jit_cache: JitCache | None = None  # what the JIT compilers' caches did for its source
    memory_retry: str | None = None  # the result is a second attempt's, and why
    output_tail: str | None = None  # the end of what the job's processes printed (a failure)
    # the server's time per worker request ("<side>.<op>", "server.<what>")
    worker_calls: dict[str, WorkerCalls] | None = None
    ray: RayPlacement | None = None  # where it ran on a Ray cluster


__all__ = ["DeviceMetrics", "JitCache", "JudgeCalibration", "MetadataBlock", "RayPlacement",
           "ReferenceNote", "ResourceUse", "ResultMetadata", "TimedSampleAudit", "WorkerCalls"]
