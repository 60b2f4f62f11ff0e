"""Content keys: a stable digest of JSON-able parts, the same in every process and run."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def content_key(*parts: Any) -> str:
    """A stable hex digest of ``parts`` (JSON-able values; dict key order does not matter).

    Stable across processes and Python runs (no ``hash()`` randomisation), so every process
    computes the same key for the same inputs.
    """
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(canonical.encode()).hexdigest()
