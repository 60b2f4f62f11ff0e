"""The files through which the server and a worker exchange one job.

``job_<id>_request.json`` (server → worker), ``job_<id>_result.json`` (worker → server,
written atomically) and ``job_<id>_stage`` (the stage the worker is in, for progress and for
saying where a crashed worker died).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def job_paths(job_dir: Path, job_id: str) -> tuple[Path, Path, Path]:
    """(request, result, stage) files of a job."""
    return (
        job_dir / f"job_{job_id}_request.json",
        job_dir / f"job_{job_id}_result.json",
        job_dir / f"job_{job_id}_stage",
    )


def write_atomic(path: Path, text: str) -> None:
    """Write a temp file, then rename: a reader sees the old file or the whole new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_stage(path: Path, stage: str, role: str = "") -> None:
    write_atomic(path, json.dumps({"stage": stage, "role": role}))


def read_stage(path: Path) -> dict[str, str] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
