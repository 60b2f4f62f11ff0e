"""How the server's log lines look: plain text, or one JSON object per line (``LOG_FORMAT=json``).

:func:`configure_logging` is called once by ``main.py``; with ``json`` every logger of the
process (uvicorn's included, see :func:`uvicorn_log_config`) writes through
:class:`JsonFormatter`. A record may carry structured fields in ``extra={"fields": {...}}``
(the job events do): they become top-level keys of the JSON object.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

from shared.settings import LogFormat

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The attribute of a log record that holds its structured fields.
FIELDS_ATTR = "fields"
# Keys a record's fields may not overwrite.
_RESERVED = frozenset({"time", "level", "logger", "message", "exc_info"})


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS_ATTR, None)
        if isinstance(fields, dict):
            entry.update((k, v) for k, v in fields.items() if k not in _RESERVED)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str, log_format: LogFormat) -> None:
    """Send every log record of the process to stderr, in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    json_lines = log_format == "json"
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def uvicorn_log_config(log_format: LogFormat) -> dict[str, Any] | None:
    """uvicorn's ``log_config``: its own in text mode; none in JSON mode, so that its loggers
    pass their records to the root handler set by :func:`configure_logging`."""
    from uvicorn.config import LOGGING_CONFIG

    return LOGGING_CONFIG if log_format == "text" else None
