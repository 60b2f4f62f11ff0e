"""The build stage runs a torch_cuda source's module code beside other jobs' timings, with no
GPU of its own: in its sandbox the GPU's device nodes read as /dev/null, so module code that
makes a GPU visible again (``CUDA_VISIBLE_DEVICES``) still finds none, and can launch nothing
that would slow another job's timing or a reference figure being taken."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.worker_pool import GPU_DEVICE_DIRS, gpu_device_nodes
from worker_host import sandbox
from worker_host.zygote import SERVER_IS_ROOT

pytestmark = [pytest.mark.gpu]

# What a build-stage module could do: undo the hidden devices, then use CUDA (in a fresh
# interpreter, as the build process imports torch before CUDA is initialised).
PROBE = ("import os, json, torch; os.environ['CUDA_VISIBLE_DEVICES'] = '0'; "
         "ok = torch.cuda.is_available(); n = torch.cuda.device_count(); "
         "print(json.dumps({'available': ok, 'devices': n}))")


def look() -> str:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, check=False)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else \
        json.dumps({"error": done.stderr[-300:]})


def test_a_sandboxed_build_process_finds_no_gpu_even_when_it_asks_for_one(
        tmp_path: Path) -> None:
    masked = gpu_device_nodes()
    assert masked, "a GPU host has /dev/nvidia* device nodes"
    # shown as a worker is shown them (worker_host.zygote): the code, and for a root server
    # the directories above it
    code = [*sandbox.code_paths(), str(Path(__file__).resolve().parents[2])]
    closed = tuple(sandbox.closed_ancestors(code)) if SERVER_IS_ROOT else ()
    seen = {}
    for name, mask in (("plain", ()), ("build", tuple(masked))):
        hidden = tuple(d for d in GPU_DEVICE_DIRS if Path(d).is_dir()) if mask else ()
        spec = sandbox.SandboxSpec(scratch=str(tmp_path / name), masked=mask,
                                   hidden=(*hidden, *closed), readable=tuple(code))
        answer = sandbox.run_in_sandbox(spec, SERVER_IS_ROOT, look)
        if answer.startswith("error:") and "unshare" in answer:
            pytest.skip(f"no namespaces here: {answer}")
        seen[name] = json.loads(answer)
    # the same sandbox without the mask sees the GPU: the mask is what takes it away
    assert seen["plain"] == {"available": True, "devices": 1}, seen
    assert seen["build"] == {"available": False, "devices": 0}, seen
