"""Requests to the running service, through files in the data dir (one process writes a
data dir: the service holds its lock, so the CLI cannot apply them itself).

    CLI:     DATA/spool/NAME.request.json   written as NAME.tmp, then renamed (atomic)
    service: polls the spool where it polls the allowlist (every few seconds), applies
             each request (forget.apply_request), writes NAME.answer.json the same way
             and removes the request
    CLI:     waits for the answer, prints it, removes it
    service: at each poll, removes the answers (and files a crash left half-written)
             older than ANSWER_KEPT_S: a CLI that gave up waiting never reads its answer

A request holds an operation and a user id; an answer holds counts and event ids, never
text.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from ..clock import REAL, Clock

log = logging.getLogger(__name__)
REQUEST, ANSWER, PARTIAL = ".request.json", ".answer.json", ".tmp"
# The CLI waits 30 s for its answer (cli/forget.py): one older than this is not awaited.
ANSWER_KEPT_S = 600.0


def spool_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "spool"


def _write_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def submit(data_dir: Path, request: dict) -> Path:
    """Drop a request; returns where its answer will appear."""
    folder = spool_dir(data_dir)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    _write_atomic(folder / (name + REQUEST), request)
    return folder / (name + ANSWER)


def wait_answer(answer: Path, timeout: float = 30.0, clock: Clock = REAL) -> dict | None:
    """The answer once it is there (then removed), None after `timeout` seconds."""
    waited = 0.0
    while waited <= timeout:
        if answer.exists():
            obj = json.loads(answer.read_text(encoding="utf-8"))
            answer.unlink(missing_ok=True)
            return obj
        clock.sleep_blocking(0.2)
        waited += 0.2
    return None


def serve(
    data_dir: Path, handle: Callable[[dict], dict], now: Callable[[], float] = REAL.wall
) -> list[dict]:
    """Apply every waiting request (the service, in a worker thread); returns the answers.
    Then sweep what no one will read (`now`: wall-clock seconds, as file times are)."""
    folder = spool_dir(data_dir)
    if not folder.is_dir():
        return []
    answers = _serve(folder, handle)
    _sweep(folder, now())
    return answers


def _sweep(folder: Path, now: float) -> None:
    swept = 0
    for path in [*folder.glob("*" + ANSWER), *folder.glob("*" + PARTIAL)]:
        try:
            if now - path.stat().st_mtime > ANSWER_KEPT_S:
                path.unlink()
                swept += 1
        except FileNotFoundError:
            continue  # read by its CLI meanwhile
    if swept:
        log.info("spool_swept", extra={"files": swept, "older_than_s": ANSWER_KEPT_S})


def _serve(folder: Path, handle: Callable[[dict], dict]) -> list[dict]:
    answers = []
    for req in sorted(folder.glob("*" + REQUEST)):
        try:
            request = json.loads(req.read_text(encoding="utf-8"))
            answer = handle(request) if isinstance(request, dict) else {"error": "bad request"}
        except (OSError, ValueError) as e:
            answer = {"error": f"unreadable request: {type(e).__name__}"}
        name = req.name[: -len(REQUEST)]
        _write_atomic(folder / (name + ANSWER), answer)
        req.unlink(missing_ok=True)
        answers.append(answer)
        log.info(
            "spool_request_served", extra={"op": answer.get("op"), "error": answer.get("error")}
        )
    return answers
