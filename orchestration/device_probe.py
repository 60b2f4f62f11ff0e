"""Ask a worker process what this host can do, so the server never imports torch itself."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.worker_pool import PROJECT_ROOT, WORKER_SCRIPT
from shared.models import GPUInfo
from shared.settings import Settings

log = logging.getLogger("kernel_eval.probe")

PROBE_TIMEOUT_S = 180


class DeviceError(RuntimeError):
    """The configured device cannot be used (e.g. DEVICE=cuda on a host without a GPU)."""


@dataclass(frozen=True)
class DeviceInfo:
    device: str  # "cuda" or "cpu"
    gpus: list[GPUInfo] = field(default_factory=list)  # the GPUs jobs will use
    torch_version: str | None = None
    errors: list[str] = field(default_factory=list)
    capability: str | None = None  # e.g. "9.0": what load_inline builds for
    # the kernel languages' versions in the workers' environment (None: not probed, the
    # server's own environment answers)
    languages: dict[str, str | None] | None = None
    # the installed languages that failed to import there, with the error
    language_import_errors: dict[str, str] = field(default_factory=dict)


async def probe_device(settings: Settings) -> DeviceInfo:
    """Run ``subprocess_worker.py --probe`` and decide the device and the GPUs to use."""
    if settings.device == "cpu":
        return DeviceInfo(device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path)
        proc = await asyncio.create_subprocess_exec(
            settings.python_executable, str(WORKER_SCRIPT), "--probe", str(out),
            env=env, cwd=str(PROJECT_ROOT),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, stderr = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT_S)
        except asyncio.TimeoutError:
            proc.kill()
            raise DeviceError(f"the worker probe did not answer within {PROBE_TIMEOUT_S} s")
        if not out.exists():
            raise DeviceError(
                "the worker probe failed: " + stderr.decode(errors="replace")[-2000:]
            )
        info = json.loads(out.read_text())
    for err in info["errors"]:
        log.warning("probe: %s", err)
    gpus = [GPUInfo(**g) for g in info["gpus"]] if info["cuda"] else []
    if settings.gpu_devices is not None and gpus:
        known = {g.id for g in gpus}
        missing = [i for i in settings.gpu_devices if i not in known]
        if missing:
            raise DeviceError(
                f"GPU_DEVICE names GPU(s) {missing}, but the host has {sorted(known)}"
            )
        gpus = [g for g in gpus if g.id in settings.gpu_devices]
    if not gpus:
        if settings.device == "cuda":
            raise DeviceError("DEVICE=cuda, but the worker sees no CUDA GPU")
        return DeviceInfo(device="cpu", torch_version=info["torch"], errors=info["errors"],
                          languages=info.get("languages"))
    return DeviceInfo(device="cuda", gpus=gpus, torch_version=info["torch"], errors=info["errors"],
                      capability=info.get("capability"), languages=info.get("languages"),
                      language_import_errors=info.get("language_import_errors") or {})
