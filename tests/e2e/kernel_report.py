"""Run a kernel whose ``forward(x)`` looks around its worker and raises ``RuntimeError("REPORT "
+ json.dumps(findings))``: the findings come back in the job's runtime_error."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx


def kernel_report(server: Any, source: str) -> dict[str, Any]:
    """The findings of ``source``'s ``forward`` run once by the server at the URL ``server``,
    or by the app behind a client of its own (an in-process ``TestClient``)."""
    client = httpx.Client(base_url=server, timeout=300) if isinstance(server, str) else server
    r = client.post("/evaluate", json={
        "kernel": {"source_code": source, "kernel_type": "torch",
                   "io": {"args": [{"name": "x", "type": "tensor", "role": "input",
                                    "tensor_spec": {"shape": [4], "dtype": "float32",
                                                    "init": {"kind": "randn"}}}]},
                   "metadata": {"function_name": "forward"}},
        "num_trials": 1})
    error = (r.json().get("kernel_exec_result") or {}).get("runtime_error") or ""
    found = re.search(r"REPORT (\{.*\})", error)
    assert found, r.text[-3000:]
    return dict(json.loads(found.group(1)))
