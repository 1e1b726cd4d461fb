"""Structured logs: an event name plus ids and counts, never message text.

    log.info("window_upserted", extra={"room_id": ..., "events": 3})
    -> 2026-11-30T02:00:00Z INFO matrix_sources.indexer.pipeline.pipeline window_upserted
       room_id=!r events=3

Every logger of the project sits under one root, `matrix_sources` (ROOT); the level of
the config applies there, libraries stay at WARNING. A field value that could forge a
line (a transaction id with `%0A`, any id from the homeserver) is written quoted, with
its control characters escaped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
ROOT = "matrix_sources"


def safe_value(v: object) -> str:
    """A field value for a key=value line: as is if it is one printable word, else
    JSON-quoted (newlines and other control characters escaped)."""
    s = str(v)
    if s and s.isprintable() and " " not in s and '"' not in s and "=" not in s:
        return s
    return json.dumps(s)


class KeyValueFormatter(logging.Formatter):
    def __init__(self, as_json: bool = False) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        if self.as_json:
            out = {
                "ts": stamp,
                "level": record.levelname,
                "logger": record.name,
                "event": record.getMessage(),
                **fields,
            }
            if record.exc_info:
                out["exc"] = self.formatException(record.exc_info)
            return json.dumps(out, default=str)
        line = f"{stamp} {record.levelname} {record.name} {safe_value(record.getMessage())}"
        if fields:
            line += " " + " ".join(f"{k}={safe_value(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _Stderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes (the process's, or a test's
    capture), never to a stream that was replaced and closed since."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


class RefusedRequestFilter(logging.Filter):
    """aiohttp logs a request it cannot parse with a traceback quoting the bytes it refused
    (`Invalid header value char: b'Authorization: Bearer a\\x00b'`): a token, a URL's
    words. On `aiohttp.server`, such a record becomes one line, `http_request_refused`,
    with the status and the parser's reason (a fixed phrase), never the bytes."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            # The reason is what precedes the quoted bytes, kept only when it is words.
            reason = str(exc.message).partition(":")[0].strip()
            record.msg, record.args = "http_request_refused", ()
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            if record.levelno > logging.WARNING:  # a client's mistake, not our error
                record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.status = exc.code
            record.reason = (
                reason if re.fullmatch(r"[A-Za-z ]{1,80}", reason) else type(exc).__name__
            )
        return True


_REFUSED_REQUESTS = RefusedRequestFilter()


class _Stdout(_Stderr):
    """The same, on `sys.stdout`: the container's log stream (CONTAINER below)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, _value) -> None:
        pass


# Set by the image (Containerfile): without a TTY, logs go to stdout as JSON, one object
# a line, for `podman logs` and the log shippers that read containers' stdout.
CONTAINER = "MATRIX_SOURCES_CONTAINER"


def setup_logging(level: str = "INFO", as_json: bool = False) -> None:
    """Set up once per process, idempotent: our one handler on the root logger is added
    if missing and reconfigured otherwise; handlers others installed (pytest's capture,
    a host program's) are left alone. The stdlib suffices: the key=value format above
    is the whole of what structlog would bring, and the library's loggers log through
    the same root."""
    to_stdout = os.environ.get(CONTAINER) == "1" and not sys.stdout.isatty()
    kind = _Stdout if to_stdout else _Stderr
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, _Stderr)), None)
    if handler is not None and type(handler) is not kind:
        root.removeHandler(handler)
        handler = None
    if handler is None:
        handler = kind()
        root.addHandler(handler)
    handler.setFormatter(KeyValueFormatter(as_json or to_stdout))
    root.setLevel(level)
    logging.getLogger(ROOT).setLevel(level)  # every logger of the project is under it
    logging.getLogger("aiohttp.server").addFilter(_REFUSED_REQUESTS)  # once: the same filter
    # mautrix logs whole requests and events at DEBUG; they may hold message text.
    for noisy in (
        "mau",
        "mautrix",
        "aiohttp.access",
        "chromadb",
        "httpx",
        "sentence_transformers",
        "urllib3",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
