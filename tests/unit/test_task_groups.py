"""Where workers' task-limited cgroups go (sandbox.task_group_parent), and which leftover groups
are removed (sandbox.remove_empty_task_groups), on fake cgroup trees."""

from __future__ import annotations

import os
from pathlib import Path

from orchestration import sandbox


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
    assert sandbox.limit_tasks(None, "x", 64) is False


def test_only_empty_groups_of_the_owner_or_of_dead_zygotes_are_removed(tmp_path: Path) -> None:
    alive, dead = os.getpid(), 2**22 + 12345  # above any pid_max: never running
    names = [f"{alive}-1", f"{alive}-2", f"{dead}-1", "other"]
    for name in names:
        (tmp_path / (sandbox.TASK_GROUP_PREFIX + name)).mkdir()
    busy = tmp_path / (sandbox.TASK_GROUP_PREFIX + f"{alive}-2")
    (busy / "cgroup.procs").write_text("123\n")  # a file: rmdir fails, as for a group in use
    sandbox.remove_empty_task_groups(str(tmp_path))  # a new zygote: dead zygotes' groups
    left = sorted(p.name.removeprefix(sandbox.TASK_GROUP_PREFIX) for p in tmp_path.iterdir())
    assert left == sorted([f"{alive}-1", f"{alive}-2", "other"])
    sandbox.remove_empty_task_groups(str(tmp_path), str(alive))  # the owner's own sweep
    left = sorted(p.name.removeprefix(sandbox.TASK_GROUP_PREFIX) for p in tmp_path.iterdir())
    assert left == sorted([f"{alive}-2", "other"])
