"""/health says where the keyword index's one-off build is (an event log from before
it: indexer/store/eventlog/keywords_build.py), and the metric says when it is ready."""

from __future__ import annotations

import json

from matrix_sources.appservice.homeserver.health import Health
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, WindowID
from matrix_sources.indexer.store.eventlog import keywords
from matrix_sources.indexer.store.eventlog.keywords_build import KeywordBuild
from matrix_sources.indexer.store.eventlog.log import EventLog

ROOM = RoomID("!a:example.org")


async def test_health_reports_the_keyword_index_build_and_then_ready(tmp_path):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    msgs = [Message(EventID(f"$m{i}"), ROOM, UserID("@a:x"), i, f"word{i} mount") for i in range(5)]
    log.append([(m, None) for m in msgs])
    log.mark_indexed(ROOM, {m.event_id: WindowID(f"w{m.ts}") for m in msgs}, msgs[-1])
    with log.transaction() as cur:  # as an event log from before the index
        keywords.reset(cur)
    build = KeywordBuild(log.db)
    health = Health(store=True, model=True, homeserver=True, keywords=lambda: dict(build.state))
    seen: list[dict] = []

    async def report() -> dict:
        return json.loads((await health.handle(None)).body)["keyword_index"]

    assert await report() == {"ready": False}
    build.run(pause=lambda: seen.append(dict(build.state)))
    assert seen[-1] == {"ready": False, "windows_done": 5, "windows_total": 5}
    assert await report() == {"ready": True}
    assert log.keywords.count() == 5
