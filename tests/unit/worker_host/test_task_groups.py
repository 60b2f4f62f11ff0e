"""Where workers' task-limited cgroups go (sandbox.task_group_parent), and which leftover groups
are removed (sandbox.remove_ended_task_groups), on fake cgroup trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker_host import sandbox


def own_cgroup(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cgroup"
    path.write_text(text)
    return str(path)


def test_cgroup_v1_uses_the_pids_hierarchy_at_this_process_s_path(tmp_path: Path) -> None:
    (tmp_path / "fs" / "pids" / "docker" / "abc").mkdir(parents=True)
    own = own_cgroup(tmp_path, "8:pids:/docker/abc\n4:memory:/x\n0::/\n")
    assert sandbox.task_group_parent(str(tmp_path / "fs"), own) == str(tmp_path / "fs/pids/docker/abc")


def test_cgroup_v2_is_used_only_where_pids_is_enabled_for_children(tmp_path: Path) -> None:
    base = tmp_path / "fs" / "srv"
    base.mkdir(parents=True)
    own = own_cgroup(tmp_path, "0::/srv\n")
    (base / "cgroup.subtree_control").write_text("cpu memory\n")
    assert sandbox.task_group_parent(str(tmp_path / "fs"), own) is None
    (base / "cgroup.subtree_control").write_text("cpu memory pids\n")
    assert sandbox.task_group_parent(str(tmp_path / "fs"), own) == str(base)


def test_no_pids_controller_or_no_proc_means_no_task_groups(tmp_path: Path) -> None:
    own = own_cgroup(tmp_path, "4:memory:/x\n1:cpu:/\n")
    assert sandbox.task_group_parent(str(tmp_path), own) is None
    assert sandbox.task_group_parent(str(tmp_path), str(tmp_path / "missing")) is None


def test_a_group_is_removed_only_once_its_worker_has_ended(tmp_path: Path) -> None:
    """A worker just forked has made its group but not entered it yet: the group is empty, and
    a sweep then (the zygote sweeps at every spawn) must leave it, or the worker runs unlimited."""
    running, ended = os.getpid(), 2**22 + 12345  # above any pid_max: never running
    names = [f"1-{running}", f"1-{ended}", f"2-{ended}", "3-busy", "other"]
    for name in names:
        (tmp_path / (sandbox.TASK_GROUP_PREFIX + name)).mkdir()
    busy = tmp_path / (sandbox.TASK_GROUP_PREFIX + f"4-{ended + 1}")
    busy.mkdir()
    (busy / "cgroup.procs").write_text("123\n")  # a file: rmdir fails, as for a group in use
    sandbox.remove_ended_task_groups(str(tmp_path))
    left = sorted(p.name.removeprefix(sandbox.TASK_GROUP_PREFIX) for p in tmp_path.iterdir())
    assert left == sorted([f"1-{running}", "3-busy", f"4-{ended + 1}", "other"])


def test_a_worker_that_cannot_enter_its_group_is_told_so(tmp_path: Path) -> None:
    """limit_tasks raises rather than let a worker run without the limit /health promised."""
    not_a_cgroup = tmp_path / "pids"
    not_a_cgroup.write_text("")
    with pytest.raises(OSError):
        sandbox.limit_tasks(str(not_a_cgroup), "1-2", 64)
