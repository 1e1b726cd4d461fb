"""Structured logs: an event name plus ids and counts, never message text.

    log.info("window_upserted", extra={"room_id": ..., "events": 3})
    -> 2026-11-30T02:00:00Z INFO indexer.pipeline window_upserted room_id=!r events=3
"""

from __future__ import annotations

import json
import logging
import sys
import time

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class KeyValueFormatter(logging.Formatter):
    def __init__(self, as_json: bool = False) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        if self.as_json:
            out = {"ts": stamp, "level": record.levelname, "logger": record.name,
                   "event": record.getMessage(), **fields}
            if record.exc_info:
                out["exc"] = self.formatException(record.exc_info)
            return json.dumps(out, default=str)
        line = f"{stamp} {record.levelname} {record.name} {record.getMessage()}"
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str = "INFO", as_json: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter(as_json))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # mautrix logs whole requests and events at DEBUG; they may hold message text.
    for noisy in ("mau", "mautrix", "aiohttp.access", "chromadb", "httpx",
                  "sentence_transformers", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
