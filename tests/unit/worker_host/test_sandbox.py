"""What a sandboxed worker sees of the file system: the real namespaces, in a forked child."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from worker_host import sandbox
from worker_host.zygote import SERVER_IS_ROOT


def in_sandbox(spec: sandbox.SandboxSpec, look: Callable[[], dict]) -> dict:
    """Run ``look`` in a process that entered ``spec`` the way a worker does; its answer."""
    answer = sandbox.run_in_sandbox(spec, SERVER_IS_ROOT, lambda: json.dumps(look()))
    if answer.startswith("error:"):
        if "unshare" in answer:
            pytest.skip(f"no namespaces here: {answer}")
        raise AssertionError(answer)
    return json.loads(answer)


def can_write(path: Path) -> bool:
    try:
        (path / "probe.txt").write_text("x")
        return True
    except OSError:
        return False


def test_a_directory_shown_inside_a_hidden_one_stays_visible_and_read_only(tmp_path: Path) -> None:
    # The Docker layout: the job store and the build cache side by side under /data.
    state = tmp_path / "data"
    (state / "build-cache" / "entry").mkdir(parents=True)
    (state / "build-cache" / "entry" / "complete.json").write_text("{}")
    (state / "jobs.sqlite3").write_text("secret")
    scratch = state / "jobs" / "work" / "w-1"
    spec = sandbox.SandboxSpec(scratch=str(scratch), hidden=(str(state), str(state / "jobs")),
                               readable=(str(state / "build-cache"),))

    def look() -> dict:
        cache = state / "build-cache"
        return {"cache_entry": (cache / "entry" / "complete.json").exists(),
                "store": (state / "jobs.sqlite3").exists(),
                "cache_writable": can_write(cache), "scratch_writable": can_write(scratch)}

    assert in_sandbox(spec, look) == {"cache_entry": True, "store": False,
                                      "cache_writable": False, "scratch_writable": True}


def test_a_directory_hidden_inside_a_shown_one_stays_hidden(tmp_path: Path) -> None:
    # A checkout under /tmp (shown: its code is imported) holding the server's state.
    checkout = tmp_path / "checkout"
    (checkout / "var" / "jobs").mkdir(parents=True)
    (checkout / "var" / "jobs.sqlite3").write_text("secret")
    (checkout / "module.py").write_text("x = 1")
    scratch = checkout / "var" / "jobs" / "work" / "w-1"
    spec = sandbox.SandboxSpec(scratch=str(scratch), hidden=(str(checkout / "var"),),
                               readable=(str(checkout),))

    def look() -> dict:
        return {"code": (checkout / "module.py").exists(),
                "store": (checkout / "var" / "jobs.sqlite3").exists(),
                "scratch_writable": can_write(scratch)}

    assert in_sandbox(spec, look) == {"code": True, "store": False, "scratch_writable": True}


def test_a_masked_file_reads_as_dev_null(tmp_path: Path) -> None:
    # The build stage's view of a GPU's device nodes (a plain file stands in for one here,
    # in a directory the worker is shown, as /dev is).
    shown = tmp_path / "dev"
    shown.mkdir()
    node, other = shown / "nvidia0", shown / "other"
    node.write_text("the device")
    other.write_text("another file")
    spec = sandbox.SandboxSpec(scratch=str(tmp_path / "w-1"), readable=(str(shown),),
                               masked=(str(node),))

    def look() -> dict:
        return {"masked": node.read_text(), "other": other.read_text(),
                "is_dev_null": os.stat(node).st_rdev == os.stat("/dev/null").st_rdev}

    assert in_sandbox(spec, look) == {"masked": "", "other": "another file", "is_dev_null": True}


def test_the_build_stage_is_denied_every_gpu_device_node(tmp_path: Path) -> None:
    from orchestration.worker_pool import gpu_device_nodes

    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).write_text("")
    (tmp_path / "nvidia-caps").mkdir()
    assert gpu_device_nodes(tmp_path) == [str(tmp_path / n)
                                          for n in ("nvidia-uvm", "nvidia0", "nvidiactl")]
