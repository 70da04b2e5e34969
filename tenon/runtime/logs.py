"""Structured logs: one JSON object per line, with the fields passed as ``extra`` (why, which object).

``log.info("claim planned", extra={"nodeclaim": name, "reason": why})`` prints
``{"time": ..., "level": "info", "service": "scheduler", "logger": ..., "msg": "claim planned", "nodeclaim":
...}``. ``TENON_LOG_FORMAT=text`` gives a compact human form for terminals.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                body[key] = value
        if record.exc_info:
            body["error"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(
            f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")
        )
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = f"{stamp} {record.levelname[0]} {record.name}: {record.getMessage()}"
        return f"{text}  {fields}" if fields else text


def configure_logging(service: str, level: str | None = None, fmt: str | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if (fmt or os.environ.get("TENON_LOG_FORMAT", "json")) == "text":
        handler.setFormatter(TextFormatter())
    else:
        handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or os.environ.get("TENON_LOG_LEVEL", "INFO")).upper())
    logging.getLogger("nats").setLevel(logging.WARNING)
