"""The moderators' report (indexer/moderation/report.py): the figures per room, and the
questions nothing answered grouped by meaning, with the real model's cut."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.moderation.report import (
    build_report,
    group,
    report_rooms,
    same_question,
)
from matrix_sources.indexer.records import EventID, RoomID
from matrix_sources.indexer.store.eventlog.feedback import Asked, RoomFigures, Unanswered
from matrix_sources.indexer.store.eventlog.log import EventLog

ROOM, OTHER = RoomID("!room:example.org"), RoomID("!other:example.org")
T0 = 1_700_000_000_000

# Two phrasings of one question each, and near misses: the same opening, another subject.
PARAPHRASES = [
    ("how do I rotate the signing key", "how can I change the signing key?"),
    ("how do I rotate the signing key", "what's the way to rotate our signing key"),
    ("where is the mirror for the iso images", "is there a download mirror for the ISOs?"),
    ("how do I reset my password", "I forgot my password, how can I reset it"),
    ("does the bridge to IRC work", "is the irc bridge down?"),
    ("when is the next release", "what date is the next release planned"),
    ("how do I enable dark mode", "is there a dark theme setting"),
    ("kestrel mirror outage yesterday evening", "was the kestrel mirror down last night"),
]
NEAR_MISSES = [
    ("how do I rotate the signing key", "how do I reset my password"),
    ("how do I rotate the signing key", "where is the mirror for the iso images"),
    ("does the bridge to IRC work", "when is the next release"),
    ("how do I enable dark mode", "how do I enable the firewall"),
    ("how do I rotate the signing key", "how do I rotate the log files"),
    ("where is the mirror for the iso images", "where is the meeting room"),
    ("how do I reset my password", "how do I reset the server"),
    ("when is the next release", "when is the next meeting"),
]


def asked(*texts: str) -> list[Unanswered]:
    return [Unanswered(EventID(f"$q{i}"), ROOM, t, T0 + i) for i, t in enumerate(texts)]


def test_the_same_words_are_one_question_without_a_model():
    gaps = group(asked("Where is the  mirror?", "where is the mirror?", "who runs it"), None, 0.62)
    assert [(g.text, g.count, g.event_ids) for g in gaps] == [
        ("Where is the  mirror?", 2, ("$q0", "$q1")),
        ("who runs it", 1, ("$q2",)),
    ]


def test_groups_are_most_asked_first_then_first_asked():
    gaps = group(
        asked(
            "backup schedule times",
            "kestrel mirror outage",
            "mirror outage kestrel",
            "kestrel mirror outage again",
        ),
        HashEmbedder(),
        0.62,
    )
    assert [(g.text, g.count) for g in gaps] == [
        ("kestrel mirror outage", 3),
        ("backup schedule times", 1),
    ]
    assert gaps[0].event_ids == ("$q1", "$q2", "$q3")


@pytest.mark.model
@pytest.mark.slow  # the real model, loaded for this test alone
def test_the_models_cut_groups_paraphrases_and_keeps_near_misses_apart(model_exports):
    from matrix_sources.indexer.models.embedder import load_embedder

    emb = load_embedder("all-MiniLM-L6-v2", "onnx-int8", model_exports)
    cut = same_question("all-MiniLM-L6-v2")
    for a, b in PARAPHRASES:
        assert [g.count for g in group(asked(a, b), emb, cut)] == [2], (a, b)
    for a, b in NEAR_MISSES:
        assert [g.count for g in group(asked(a, b), emb, cut)] == [1, 1], (a, b)


def test_the_report_per_room_and_its_json(tmp_path):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    fb = log.feedback
    for n, (room, hits, text) in enumerate(
        [
            (ROOM, 2, None),
            (ROOM, 0, "kestrel mirror outage"),
            (ROOM, 0, "Kestrel mirror outage"),
            (OTHER, 0, "who runs the backups"),
        ]
    ):
        fb.record(
            Asked(EventID(f"$q{n}"), room, "@a:example.org", T0 + n, EventID(f"$a{n}"), hits, text)
        )
    rooms = report_rooms(fb, [ROOM, RoomID("!quiet:example.org")], T0, {ROOM: "#help:example.org"})
    assert rooms == [
        (ROOM, "#help:example.org"),
        (RoomID("!other:example.org"), ""),
        (RoomID("!quiet:example.org"), ""),
    ]
    report = build_report(fb, rooms, T0, T0 + 7 * 86_400_000, HashEmbedder())
    assert report.rooms[0].figures == RoomFigures(ROOM, asked=3, answered=1, nothing_matched=2)
    assert report.to_json() == {
        "rooms": [
            {
                "room_id": ROOM,
                "room_label": "#help:example.org",
                "asked": 3,
                "answered": 1,
                "nothing_matched": 2,
                "up": 0,
                "down": 0,
                "solved": 0,
                "unanswered": [
                    {"text": "kestrel mirror outage", "count": 2, "event_ids": ["$q1", "$q2"]}
                ],
            },
            {
                "room_id": OTHER,
                "room_label": "",
                "asked": 1,
                "answered": 0,
                "nothing_matched": 1,
                "up": 0,
                "down": 0,
                "solved": 0,
                "unanswered": [{"text": "who runs the backups", "count": 1, "event_ids": ["$q3"]}],
            },
            {
                "room_id": "!quiet:example.org",
                "room_label": "",
                "asked": 0,
                "answered": 0,
                "nothing_matched": 0,
                "up": 0,
                "down": 0,
                "solved": 0,
                "unanswered": [],
            },
        ]
    }
    log.close()
