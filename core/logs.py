"""Log lines as JSON objects, one a line, for `MORTAR_LOG_FORMAT=json`.

A record's message becomes `message`; a record logged with `extra={"fields": {...}}` (the
request line, `telemetry.request_log`) carries those fields at the top level beside it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson


class JsonFormatter(logging.Formatter):
    """Format each record as one JSON object."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()
