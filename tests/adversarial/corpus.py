"""The adversarial corpus's data model, the request builders its cases share, and the verdict
helpers both test modules use.

A case is data: a :class:`Cheat` (a kernel that tries to win without doing the work, or to
get out of its worker), or an :class:`Honest` kernel that must pass unflagged. Each lives in a
module of its own under ``cheats/`` or ``honest/`` whose docstring says what it tries and what
must catch it; ``catalogue.py`` lists them all.

Builders receive a :class:`Target`: everything a case may know about the server under test.
All of it belongs to the test's own server (its port, its state directory, a fresh token), so
an escape kernel can be aimed at that server and at nothing else on the machine.

A timing cheat either states what must become of it (:class:`Expect`: it fails, it is
flagged, or its published figures stay within the residual of its honest twin's; see
``outcomes.py``), or is held to the older rule of :func:`test_cheats.caught`. Sized cheats are
tried at each of :data:`SIZES`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import httpx

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Workload sizes: big enough that the honest call takes measurably longer than a cheat's
# shortcut (a cached answer, a skipped wait), small enough for a 2-core CI run.
CPU_MATMUL_N = 256
GPU_MATMUL_N = 2048


class Family(str, Enum):
    TIMING = "timing"  # the reported number is smaller than the work done
    VERDICT = "verdict"  # a wrong or unearned answer is reported correct
    ESCAPE = "escape"  # the kernel reaches outside its worker


class Expect(str, Enum):
    """What must become of a cheat: each of its answers is read as one of these (or ``won``)."""

    FAILS = "fails"  # its verdict is not a pass (incorrect, runtime error, ...)
    FLAGGED = "flagged"  # a pass, with integrity.suspicious and a reason
    # a pass, unflagged, whose published speedup and runtime stay within the residual of its
    # honest twin's, timed in the same test (outcomes.residual_ms)
    BOUNDED = "bounded"


@dataclass(frozen=True)
class Size:
    """A problem size of the sized timing cheats: a float32 matmul of ``gpu_n`` on a GPU (about
    ``label`` of honest work on an H200), of ``cpu_n`` in CPU mode (None: tried on a GPU only)."""

    label: str
    gpu_n: int
    cpu_n: int | None

    def n(self, target: Target) -> int:
        if target.gpu:
            return self.gpu_n
        return self.cpu_n if self.cpu_n is not None else CPU_MATMUL_N


# 20 us, 0.1 ms and 1 ms of honest work on an H200. In CPU mode the call's own work must
# outweigh the hand-over's copies and wake-ups for a bound to hold (compute-bound calls read
# 0.92-1.05 against themselves on a 2-core host): matmuls of 1.5 ms and 11 ms; the 20 us
# size, which the hand-over's noise would swamp there, is tried on a GPU only.
SIZE_20US = Size("20us", 768, None)
SIZE_100US = Size("100us", 1280, 512)
SIZE_1MS = Size("1ms", 3072, 1024)
SIZES = (SIZE_20US, SIZE_100US, SIZE_1MS)


@dataclass(frozen=True)
class Target:
    """What a case may know about the server under test (all of it the test's own)."""

    gpu: bool
    url: str
    state_dir: Path  # the server's state: job store, job directory, build cache
    job_dir: Path  # the server's JOB_DIR (unique per server: also the kill scan's marker)
    token: str  # fresh per test: sentinel file names, secrets
    project_root: Path = PROJECT_ROOT

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def matmul_n(self) -> int:
        return GPU_MATMUL_N if self.gpu else CPU_MATMUL_N

    @property
    def timing_trials(self) -> int:
        return 50 if self.gpu else 15


@dataclass(frozen=True)
class Job:
    """One request: the route and its JSON body."""

    route: Literal["/compare", "/evaluate"]
    body: dict[str, Any]


Builder = Callable[[Target], Job]


Check = Callable[[dict[str, Any], dict[str, Any]], str | None]


@dataclass(frozen=True)
class KnownWin:
    """A way a cheat still wins, with its figures and the fix proposed (``reason``).

    A win every time makes its test an expected failure (strict: the test says so once the
    win is gone). A win by chance (the audit's draw, a disturbed calibration) is told apart in
    the answer by ``shows(answer, twin's answer)``: where the cheat's own check of the answer
    held, the test is then marked as an expected failure, with what it read; it passes where
    the cheat lost, and any other outcome fails it as before."""

    reason: str
    shows: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None

    @property
    def by_chance(self) -> bool:
        return self.shows is not None


@dataclass(frozen=True)
class Cheat:
    """A kernel that games the verdict or the number (``TIMING``/``VERDICT``).

    Caught when its job does not pass, or is flagged suspicious, or (with an ``honest`` twin)
    reports a median at least half the honest twin's, measured in the same test.
    """

    name: str
    family: Family
    technique: str  # which of the cheat kinds it stands for (see catalogue.TECHNIQUES)
    tries: str  # what it does
    caught_by: str  # the defence that must catch it
    build: Builder
    honest: Builder | None = None  # the same work done honestly: the timing yardstick
    gpu: bool = False
    # the share of the honest twin's median a reported median must reach to count as honest
    # (a cheat that gains little must be held to a tighter share)
    honest_fraction: float = 0.5
    # What must become of it (empty: the older rule above). Several where chance decides
    # (the audit's draw); ``cpu_expect`` where the CPU's hand-over makes it another attack.
    expect: tuple[Expect, ...] = ()
    cpu_expect: tuple[Expect, ...] | None = None
    # What its answer must show besides (the attack reached the server, the published reading
    # is the one it shaped): None when shown, else what is missing. Gets (answer, twin's answer).
    check: Check | None = None
    size: Size | None = None
    known_win: KnownWin | None = None

    def expected(self, target: Target) -> tuple[Expect, ...]:
        if not target.gpu and self.cpu_expect is not None:
            return self.cpu_expect
        return self.expect


@dataclass
class AttackRun:
    """What came back from an escape attempt: a response, or the transport error instead."""

    status_code: int | None = None
    text: str = ""
    transport_error: str | None = None

    def json(self) -> dict[str, Any]:
        import json

        return json.loads(self.text)


@dataclass(frozen=True)
class Escape:
    """A kernel that tries to reach outside its worker (``ESCAPE``).

    ``arrange`` prepares what the attack aims at (another job, a listener) and returns it;
    ``verify`` returns the breaches it finds after the attack (empty: contained); ``cleanup``
    removes whatever a successful attack left behind, whatever the outcome.
    """

    name: str
    technique: str
    tries: str
    caught_by: str
    attack: Callable[[Target, Any], Job]
    verify: Callable[[httpx.Client, Target, Any, AttackRun], list[str]]
    arrange: Callable[[httpx.Client, Target], Any] = lambda client, target: None
    cleanup: Callable[[Target, Any], None] = lambda target, state: None
    family: Family = Family.ESCAPE
    gpu: bool = False


@dataclass(frozen=True)
class Honest:
    """A correct kernel that must pass with ``integrity.suspicious`` false."""

    name: str
    kernel_type: str  # torch, torch_cuda, triton, cuda, multi_kernel
    what: str
    build: Builder
    gpu: bool = False
    features: tuple[str, ...] = field(default=())  # e.g. "streams", "inout", "cublas", "large"


# ---- request builders ---------------------------------------------------------------------


def tensor(
    name: str, shape: list[int], seed: int | None = None, *, dtype: str = "float32",
    role: str = "input", init: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A tensor argument: seeded randn unless ``init`` says otherwise."""
    if init is None:
        init = {"kind": "randn", "seed": seed if seed is not None else 1}
    return {"name": name, "type": "tensor", "role": role,
            "tensor_spec": {"shape": shape, "dtype": dtype, "init": init}}


def output(name: str, shape: list[int], dtype: str = "float32") -> dict[str, Any]:
    return {"name": name, "type": "tensor", "role": "output",
            "tensor_spec": {"shape": shape, "dtype": dtype}}


def scalar(name: str, value: float, kind: str = "int", meta: bool = False) -> dict[str, Any]:
    arg: dict[str, Any] = {"name": name, "type": kind, "value": value}
    if meta:
        arg["is_meta"] = True
    return arg


def io(*args: dict[str, Any], launch: dict[str, Any] | None = None) -> dict[str, Any]:
    contract: dict[str, Any] = {"args": list(args)}
    if launch is not None:
        contract["launch"] = launch
    return contract


def kernel(
    kind: str, source: str, contract: dict[str, Any] | None = None, **metadata: Any
) -> dict[str, Any]:
    k: dict[str, Any] = {"source_code": source, "kernel_type": kind}
    if contract is not None:
        k["io"] = contract
    if metadata:
        k["metadata"] = metadata
    return k


def torch_kernel(
    source: str, contract: dict[str, Any] | None = None, **metadata: Any
) -> dict[str, Any]:
    return kernel("torch", source, contract, **metadata)


def model(expression: str, params: str = "x", cls: str = "Model") -> str:
    """The source of a torch module whose forward(``params``) returns ``expression``."""
    return (f"class {cls}(torch.nn.Module):\n    def forward(self, {params}):\n"
            f"        return {expression}\n")


def compare(
    ref: dict[str, Any], custom: dict[str, Any], *, trials: int = 10, correct_trials: int = 2,
    timeout: int = 300, **extra: Any,
) -> Job:
    body = {"ref_kernel": ref, "custom_kernel": custom, "num_trials": trials,
            "num_correct_trials": correct_trials, "timeout": timeout, **extra}
    return Job("/compare", body)


def evaluate(k: dict[str, Any], *, trials: int = 5, timeout: int = 300) -> Job:
    return Job("/evaluate", {"kernel": k, "num_trials": trials, "timeout": timeout})


# The workload of the timing cheats: a float32 matmul, the reference and its honest twin.

MATMUL_REF = """
class Model(torch.nn.Module):
    def forward(self, a, b):
        return a @ b
"""

MATMUL_HONEST = """
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""


def matmul_io(target: Target, n: int | None = None) -> dict[str, Any]:
    n = n or target.matmul_n
    return io(tensor("a", [n, n], 1), tensor("b", [n, n], 2))


def matmul_compare(target: Target, custom: dict[str, Any], n: int | None = None,
                   **extra: Any) -> Job:
    """/compare of ``custom`` against the matmul reference (the custom takes its inputs), of
    ``n`` x ``n`` matrices (the target's size by default)."""
    extra.setdefault("trials", target.timing_trials)
    return compare(torch_kernel(MATMUL_REF, matmul_io(target, n)), custom, **extra)


def matmul_honest(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(MATMUL_HONEST))


# A request that fixes fewer samples than this wants a quick answer, and the kernel's process
# is then not asked for its own figures (harness.timer.few): cheats that forge those figures
# ask for at least this many.
FULL_RUN_SAMPLES = 20


def sized_compare(size: Size, source: str, full_run: bool = False, **extra: Any) -> Builder:
    """A builder of /compare of the torch kernel ``source`` (``@N@`` in it: the matmul's n)
    against the matmul reference at ``size``; ``full_run``: with its figures beside."""

    def build(target: Target) -> Job:
        n, kwargs = size.n(target), dict(extra)
        if full_run:
            kwargs.setdefault("trials", max(target.timing_trials, FULL_RUN_SAMPLES))
        return matmul_compare(target, torch_kernel(fill(source, N=n)), n=n, **kwargs)

    return build


def matmul_cheat(source: str) -> Builder:
    """A builder for a torch cheat against the matmul reference."""
    return lambda target: matmul_compare(target, torch_kernel(source))


def fill(template: str, **values: object) -> str:
    """``template`` with ``@NAME@`` placeholders replaced (sources are full of braces)."""
    for name, value in values.items():
        template = template.replace(f"@{name}@", str(value))
    assert "@" not in template.replace("@triton", "").replace("@torch", ""), template
    return template


# Escape kernels: a torch kernel whose forward runs ``attack()`` (a function its source
# defines, returning a description of what happened) and then raises that description, so
# that it comes back in the job's ``runtime_error`` as proof that the attack ran.

ESCAPE_REPORT = "ESCAPE-REPORT"

ESCAPE_TEMPLATE = """
import os
import sys
from pathlib import Path

@ATTACK@


class Model(torch.nn.Module):
    def forward(self, x):
        report = attack()
        print("@REPORT@ @NAME@:", report, flush=True)
        raise RuntimeError("@REPORT@ @NAME@: " + report)
"""


def escape_job(name: str, attack_source: str) -> Job:
    """/evaluate of a kernel that runs ``attack_source``'s ``attack()`` and reports it."""
    source = ESCAPE_TEMPLATE.replace("@ATTACK@", attack_source.strip("\n"))
    source = source.replace("@REPORT@", ESCAPE_REPORT).replace("@NAME@", name)
    return evaluate(torch_kernel(source, io(tensor("x", [1024], 1))), trials=1, timeout=120)


# ---- reading results ----------------------------------------------------------------------


def run(client: httpx.Client, job: Job) -> dict[str, Any]:
    """Submit ``job`` and wait for its answer (timeouts and kernel failures are answers too)."""
    r = client.post(job.route, json=job.body)
    # A kernel's failure is a verdict; HTTP 500 means the kernel broke the server itself.
    assert r.status_code in (200, 408), (
        f"{job.route} answered HTTP {r.status_code} instead of a verdict (a kernel must never "
        f"cause a server error): {r.text[:2000]}"
    )
    body: dict[str, Any] = r.json()
    record(job, body)
    return body


RECORD_ENV = "KES_CORPUS_RECORD"


def record(job: Job, body: dict[str, Any]) -> None:
    """With ``KES_CORPUS_RECORD`` set to a file, append what a GPU run needs to read a verdict
    afterwards (the test, the median, the integrity block, the judge's figures) as a JSON line."""
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    result = exec_result(body)
    meta = result.get("metadata") or {}
    line = {"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "route": job.route,
            "status": body.get("status"), "outcome": result.get("outcome"),
            "median_ms": median_ms(body), "speedup": meta.get("speedup"),
            "integrity": result.get("integrity"), "timing_figures": meta.get("timing_figures"),
            "judge_calibration": meta.get("judge_calibration")}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, default=str) + "\n")


def exec_result(body: dict[str, Any]) -> dict[str, Any]:
    return body.get("kernel_exec_result") or {}


def passed(body: dict[str, Any]) -> bool:
    """The verdict is a pass: success all the way down (and correct, for a comparison)."""
    result = exec_result(body)
    if body.get("status") != "success" or result.get("outcome") != "success":
        return False
    if not result.get("compiled"):
        return False
    if "ref_kernel" in body or body.get("ref_runtime") is not None or "ref_exec_result" in body:
        return result.get("correctness") is True
    return result.get("correctness") in (True, None)


def integrity(body: dict[str, Any]) -> dict[str, Any] | None:
    return exec_result(body).get("integrity")


def suspicious(body: dict[str, Any]) -> bool:
    block = integrity(body)
    return bool(block and block.get("suspicious"))


def median_ms(body: dict[str, Any]) -> float | None:
    stats = exec_result(body).get("runtime_stats") or {}
    return stats.get("median")


def timing_figures(body: dict[str, Any]) -> dict[str, Any]:
    """The judge's figures beside the number (``metadata.timing_figures``; empty if none)."""
    return (exec_result(body).get("metadata") or {}).get("timing_figures") or {}


def audit_caught(body: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """A check for cheats the timed-sample audit must fail: where the answer is a failure,
    the audit's (not, say, the cheat's own bug); None where so, or where it passed."""
    if passed(body):
        return None
    reasons = (exec_result(body).get("integrity") or {}).get("reasons") or []
    if any("wrong while timed" in r for r in reasons):
        return None
    return f"it failed, but not by the audit of the timed samples: {summary(body)}"


def summary(body: dict[str, Any]) -> str:
    """The parts of an answer that explain a verdict, for assertion messages."""
    result = exec_result(body)
    stats = result.get("runtime_stats") or {}
    parts = [
        f"status={body.get('status')}", f"outcome={result.get('outcome')}",
        f"correctness={result.get('correctness')}", f"median={stats.get('median')}",
        f"method={stats.get('method')}", f"speedup={result.get('metadata', {}).get('speedup')}",
        f"integrity={result.get('integrity')}",
    ]
    for key in ("compilation_error", "runtime_error", "validation_error"):
        if result.get(key):
            parts.append(f"{key}={result[key][-600:]!r}")
    if body.get("error"):
        parts.append(f"error={str(body['error'])[-600:]!r}")
    return "; ".join(parts)
