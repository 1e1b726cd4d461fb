"""`matrix-sources report [--room R] [--days N] [--json]`: what the bot was asked, per
room (indexer/moderation/report.py). It reads the event log without writing it, so the
service may run or not; the model is loaded only when some question got "nothing
matches" (to group them by meaning)."""

from __future__ import annotations

import json
import sys

from matrix_sources.indexer.clock import REAL
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.records import RoomID

EX_USAGE = 2


def run_report(cfg: Config, room: str | None, days: float, as_json: bool) -> int:
    from matrix_sources.indexer.ingest.allowlist import load_allowlist
    from matrix_sources.indexer.moderation.report import (
        DAY_MS,
        build_report,
        report_rooms,
        same_question,
    )
    from matrix_sources.indexer.store.eventlog.check import check_eventlog
    from matrix_sources.indexer.store.eventlog.log import EventLog
    from matrix_sources.indexer.store.eventlog.schema import version

    from ..bot.report import render_text
    from .journal import allowlist_aliases

    if not days > 0:
        print(f"error: --days takes a number of days above 0, not {days:g}", file=sys.stderr)
        return EX_USAGE
    allowlist = load_allowlist(cfg.allowlist_path)
    if room is not None:
        room = allowlist_aliases(cfg).get(room, room)
        if room not in allowlist:
            print(
                f"error: --room {room!r} is not on the allowlist ({cfg.allowlist_path}); "
                "`matrix-sources allowlist list` shows the rooms",
                file=sys.stderr,
            )
            return EX_USAGE
    kept = cfg.moderation.keep_days
    if days > kept:
        print(
            f"note: questions are kept {kept} days (moderation.keep_days): the report covers those",
            file=sys.stderr,
        )
        days = kept
    now = REAL.now_ms()
    since = now - int(days * DAY_MS)
    if check_eventlog(cfg.database).state == "missing":
        rooms = [(RoomID(r), "") for r in ([room] if room else allowlist)]
        return _print(_empty(rooms, since, now), cfg, as_json, render_text)
    eventlog = EventLog(cfg.database, read_only=True)  # beside a running service
    try:
        if version(eventlog.db) < 13:
            print(
                "error: the event log predates the report: start the service once (it "
                "brings the event log up to date)",
                file=sys.stderr,
            )
            return 1
        labels = eventlog.claims.labels()
        rooms = (
            [(RoomID(room), labels.get(RoomID(room), ""))]
            if room
            else report_rooms(eventlog.feedback, allowlist, since, labels)
        )
        embedder = None
        if any(eventlog.feedback.unanswered(r, since) for r, _ in rooms):
            from .progress import load_model

            embedder = load_model(cfg)
        report = build_report(
            eventlog.feedback, rooms, since, now, embedder, same_question(cfg.index.embedder.model)
        )
    finally:
        eventlog.close()
    return _print(report, cfg, as_json, render_text)


def _empty(rooms, since: int, now: int):
    from matrix_sources.indexer.moderation.report import Report, RoomReport
    from matrix_sources.indexer.store.eventlog.feedback import RoomFigures

    return Report(tuple(RoomReport(r, label, RoomFigures(r)) for r, label in rooms), since, now)


def _print(report, cfg: Config, as_json: bool, render_text) -> int:
    if as_json:
        print(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
    else:
        print(render_text(report, cfg.homeserver.domain))
    return 0
