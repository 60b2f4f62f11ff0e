"""A slot's settings on its node: every path the job touches lies under RAY_NODE_DIR."""

from __future__ import annotations

from pathlib import Path

from orchestration.ray_node import node_settings
from shared.settings import Settings


def test_a_node_keeps_jobs_and_caches_under_its_own_root_and_no_server_secret() -> None:
    server = Settings(job_dir=Path("/srv/jobs"), job_store_path=Path("/srv/var/jobs.sqlite3"),
                      build_cache_dir=Path("/srv/builds"), ref_cache_dir=Path("/srv/refs"),
                      ray_node_dir=Path("/data/kes"), api_key="secret", gpu_devices=(3,),
                      max_workers=8)
    node = node_settings(server, "ab12-0")

    assert node.job_dir == Path("/data/kes/slots/ab12-0/jobs")
    assert (node.build_cache_dir, node.ref_cache_dir, node.cupy_cache_dir) == (
        Path("/data/kes/builds"), Path("/data/kes/references"), Path("/data/kes/cupy"))
    # The job store's directory is hidden from workers: on a node that is the job files'.
    assert node.job_store_path.parent == node.job_dir
    assert (node.api_key, node.gpu_devices, node.max_workers) == (None, None, 1)


def test_the_node_root_is_the_home_of_the_user_ray_runs_as() -> None:
    node = node_settings(Settings(), "x-1")
    assert node.build_cache_dir == Path.home() / ".cache" / "kernel_eval" / "node" / "builds"
