"""Questions and votes at /metrics (issue 47 item 6), through the service's HTTP
endpoint, by room only with metrics.per_room; and contrib/grafana-dashboard.json, whose
every panel asks for a metric the service exports."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.moderationkit import (
    ALICE,
    BOB,
    DM,
    ROOM,
    close_moderated,
    make_data_dir,
    open_moderated,
    reaction,
)
from tests.paths import ROOT

DASHBOARD = ROOT / "contrib" / "grafana-dashboard.json"
PANELS = (
    "Questions per day",
    "Share answered",
    "Votes per day",
    "Indexing lag",
    "Messages pending",
)
UP, DOWN = "\N{THUMBS UP SIGN}", "\N{THUMBS DOWN SIGN}"


async def scrape(m) -> dict[str, float]:
    resp = await m.client.get("/metrics")
    assert resp.status == 200
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in (await resp.text()).splitlines()
        if line and line[0] != "#"
    }


async def ask_and_vote(m) -> None:
    m.say("rotate the signing key with the rotate-key command, then restart")
    answered = await m.ask("$q1", "how do I rotate the signing key", ALICE)
    await m.ask("$q2", "kestrel mirror outage yesterday", BOB)
    await m.ask("$q3", "kestrel mirror outage", BOB, room=DM)  # not counted anywhere
    await m.put(
        [reaction("$v1", answered, UP + "\U0001f3fe", BOB), reaction("$v2", answered, DOWN, ALICE)]
    )
    await m.bot.idle()


@pytest.mark.parametrize("per_room", [False, True])
async def test_questions_and_votes_are_counted_at_metrics(tmp_path, per_room):
    m = await open_moderated(make_data_dir(tmp_path, metrics={"per_room": per_room}))
    try:
        await ask_and_vote(m)
        got = await scrape(m)
    finally:
        await close_moderated(m)
    room = f'room_id="{ROOM}"'
    if per_room:
        assert got[f"matrix_sources_questions_asked_total{{{room}}}"] == 2
        assert got[f"matrix_sources_questions_answered_total{{{room}}}"] == 1
        assert got[f"matrix_sources_questions_nothing_matched_total{{{room}}}"] == 1
        assert got[f'matrix_sources_votes_total{{{room},vote="up"}}'] == 1
        assert got[f'matrix_sources_votes_total{{{room},vote="down"}}'] == 1
        assert not any(DM in k for k in got)
    else:
        assert got["matrix_sources_questions_asked_total"] == 2
        assert got["matrix_sources_questions_answered_total"] == 1
        assert got["matrix_sources_questions_nothing_matched_total"] == 1
        assert got['matrix_sources_votes_total{vote="up"}'] == 1
        assert got['matrix_sources_votes_total{vote="down"}'] == 1
        assert not any("room_id" in k for k in got if "questions" in k or "votes" in k)


def exported(registry) -> set[str]:
    """The series names a scrape can hold, by each family's type."""
    names = set()
    for family in registry.collect():
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("_sum", "_count", ""),
        }.get(family.type, ("",))
        names.update(family.name + s for s in suffixes)
    return names


def panels(dashboard: dict) -> list[dict]:
    out = []
    for p in dashboard.get("panels", []):
        out.append(p)
        out += p.get("panels", [])  # a row's folded panels
    return out


def unknown_metrics(dashboard: dict, names: set[str]) -> list[str]:
    """`panel: name` for each metric a panel's query names that is not exported, and
    `panel: (no query)` for a panel that names none."""
    found = []
    for p in panels(dashboard):
        asked = [
            n
            for t in p.get("targets", [])
            for n in re.findall(r"\bmatrix_sources_\w+", t.get("expr", ""))
        ]
        if not asked:
            found.append(f"{p.get('title')}: (no query)")
        found += [f"{p.get('title')}: {n}" for n in asked if n not in names]
    return found


async def test_every_panel_of_the_dashboard_asks_for_an_exported_metric(tmp_path):
    m = await open_moderated(make_data_dir(tmp_path))
    try:
        await ask_and_vote(m)
        await scrape(m)  # starts the event log's figures (the cursor lag) in the background
        task = m.service.metrics.sources.figures.refresh()
        if task is not None:
            await asyncio.wait_for(task, 30)
        names = exported(m.service.metrics.registry)
    finally:
        await close_moderated(m)
    assert {"matrix_sources_votes_total", "matrix_sources_cursor_lag_seconds"} <= names
    dashboard = json.loads(DASHBOARD.read_text())
    assert [p["title"] for p in panels(dashboard)] == list(PANELS)
    assert unknown_metrics(dashboard, names) == []


def test_the_dashboard_check_can_fail():
    probe = {
        "panels": [
            {"title": "ok", "targets": [{"expr": "sum(rate(matrix_sources_votes_total[5m]))"}]},
            {
                "title": "row",
                "panels": [{"title": "typo", "targets": [{"expr": "matrix_sources_vote_total"}]}],
                "targets": [{"expr": "matrix_sources_ready"}],
            },
            {"title": "empty", "targets": [{"expr": "up"}]},
        ]
    }
    assert unknown_metrics(probe, {"matrix_sources_votes_total", "matrix_sources_ready"}) == [
        "typo: matrix_sources_vote_total",
        "empty: (no query)",
    ]
