"""The GPU's clocks, temperature and power while a kernel is timed, read by the server (NVML).

A timing is only as steady as the GPU's state under it: a compute-bound kernel's time follows
the SM clock, and the clock follows power and temperature. So each timed call of a job is
sampled from the server's side (``nvidia-ml-py``, outside the worker and out of the kernel's
reach): SM clock, memory clock, temperature and power every ``period_s`` from just before the
call to just after, and every clock-limiting reason the driver reported meanwhile (power cap,
thermal slowdown, ...). The result names the regime a figure was taken in, and two figures
that differ can be told apart by it. It never enters a verdict.

The GPU is found by its UUID (the worker probe reports it), so the server's GPU numbering
(CUDA's) and NVML's (PCI order) need not agree. Without NVML, or for a GPU it cannot find,
there is no state: ``None``, never made-up numbers.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from types import ModuleType
from typing import Any

log = logging.getLogger("kernel_eval.gpu_state")

PERIOD_S = 0.1

# NVML's clock-event ("throttle") reason bits, by the names the result uses.
REASONS = {
    0x1: "gpu_idle",
    0x2: "user_defined_clocks",  # locked or application clocks
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def nvml_uuid(uuid: str) -> str:
    """A GPU's UUID as NVML names it: "GPU-..." (torch prints it without the prefix)."""
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


class GpuState:
    """NVML for this process: opened on first use, one handle per GPU UUID."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self._nvml = nvml
        self._ready: bool | None = None
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _open(self) -> bool:
        with self._lock:
            if self._ready is None:
                try:
                    if self._nvml is None:
                        import pynvml  # nvidia-ml-py

                        self._nvml = pynvml
                    self._nvml.nvmlInit()
                    self._ready = True
                except Exception as exc:  # noqa: BLE001 - no NVML: no state, said once
                    log.info("no GPU state in results (NVML: %s)", exc)
                    self._ready = False
            return self._ready

    def handle(self, uuid: str | None) -> Any:
        if not uuid or not self._open():
            return None
        if uuid not in self._handles:
            name = nvml_uuid(uuid)
            try:
                self._handles[uuid] = self._nvml.nvmlDeviceGetHandleByUUID(name)  # type: ignore[union-attr]
            except Exception as exc:  # noqa: BLE001
                log.info("no GPU state for %s (NVML: %s)", name, exc)
                self._handles[uuid] = None
        return self._handles[uuid]

    def sampler(self, uuid: str | None, period_s: float = PERIOD_S) -> Sampler | None:
        handle = self.handle(uuid)
        return Sampler(self._nvml, handle, period_s) if handle is not None else None


class Sampler:
    """Samples one GPU on a thread of its own between :meth:`start` and :meth:`stop`."""

    def __init__(self, nvml: Any, handle: Any, period_s: float) -> None:
        self.nvml, self.handle, self.period_s = nvml, handle, period_s
        self.rows: list[tuple[float, ...]] = []
        self.reasons = 0
        self.failed: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kes-gpu-state", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, Any] | None:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.summary()

    def _run(self) -> None:
        while True:
            self.sample()
            if self.failed is not None or self._stop.wait(self.period_s):
                break
        if self.failed is None:
            self.sample()  # just after the call

    def sample(self) -> None:
        n, h = self.nvml, self.handle
        try:
            sm = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
            mem = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)
            temp = n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
            power = n.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW
            reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) \
                or n.nvmlDeviceGetCurrentClocksThrottleReasons  # older NVML's name
            self.reasons |= int(reasons(h))
        except Exception as exc:  # noqa: BLE001 - a GPU that stops answering: what we have
            self.failed = str(exc)[:200]
            return
        self.rows.append((time.monotonic(), float(sm), float(mem), float(temp), power))

    def summary(self) -> dict[str, Any] | None:
        if not self.rows:
            return None
        _, sm, mem, temp, power = (list(col) for col in zip(*self.rows))

        def spread(values: list[float], digits: int = 0) -> dict[str, float]:
            return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
                    "max": round(max(values), digits)}

        try:
            limit = round(self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0, 1)
        except Exception:  # noqa: BLE001 - not every GPU reports it: absent, not zero
            limit = None
        try:
            highest = float(self.nvml.nvmlDeviceGetMaxClockInfo(self.handle,
                                                                self.nvml.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001 - as above
            highest = None
        return {
            "samples": len(self.rows), "period_ms": round(self.period_s * 1e3),
            "sm_clock_mhz": spread(sm), "sm_clock_max_mhz": highest,
            "memory_clock_mhz": spread(mem),
            "temperature_c": spread(temp), "power_w": spread(power, 1), "power_limit_w": limit,
            # "gpu_idle" only says the GPU had no work at some sample (the gaps between samples)
            "clock_limits": [r for r in reason_names(self.reasons) if r != "gpu_idle"],
        }
