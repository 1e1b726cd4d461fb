"""`matrix-sources report` (issue 47 item 2): per room, with the service's event log
open beside it or none at all; `--json` in the issue's shape, counts as integers."""

from __future__ import annotations

import json
import time

from matrix_sources.appservice.cli.main import main
from matrix_sources.indexer.records import EventID, RoomID
from matrix_sources.indexer.store.eventlog.feedback import Asked, Reaction, Vote
from matrix_sources.indexer.store.eventlog.log import EventLog
from tests.moderationkit import ALICE, BOB, ROOM, make_data_dir

SHAPE = {
    "room_id",
    "room_label",
    "asked",
    "answered",
    "nothing_matched",
    "up",
    "down",
    "solved",
    "unanswered",
}


def fill(config) -> EventLog:
    """The service's event log, left open (as a running service holds it)."""
    log = EventLog(config.parent / "eventlog.sqlite3")
    now = int(time.time() * 1000)
    for n, (hits, text, days_ago) in enumerate(
        [
            (3, None, 0),
            (0, "where is the kestrel mirror", 2),
            (0, "Where is the kestrel mirror", 1),
            (0, "how old is the backup", 10),
        ]
    ):
        log.feedback.record(
            Asked(
                EventID(f"$q{n}"),
                RoomID(ROOM),
                ALICE,
                now - days_ago * 86_400_000 - 1000,
                EventID(f"$a{n}"),
                hits,
                text,
            )
        )
    log.feedback.react(
        [
            Reaction(EventID("$v"), RoomID(ROOM), BOB, EventID("$a0"), Vote.UP, now - 1000),
            Reaction(EventID("$s"), RoomID(ROOM), ALICE, EventID("$a0"), Vote.SOLVED, now - 1000),
        ]
    )
    log.claims.set_label(RoomID(ROOM), "#help:example.org")
    return log


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_per_room_while_the_service_holds_the_event_log(tmp_path, capsys):
    config = make_data_dir(tmp_path)
    log = fill(config)
    try:
        code, out, _ = run(capsys, "-c", str(config), "--json")
        assert code == 0
        report = json.loads(out)
        assert list(report) == ["rooms"]
        [room] = report["rooms"]
        assert set(room) == SHAPE
        assert {k: v for k, v in room.items() if k != "unanswered"} == {
            "room_id": ROOM,
            "room_label": "#help:example.org",
            "asked": 3,
            "answered": 1,
            "nothing_matched": 2,
            "up": 1,
            "down": 0,
            "solved": 1,
        }
        assert room["unanswered"] == [
            {"text": "where is the kestrel mirror", "count": 2, "event_ids": ["$q1", "$q2"]}
        ]
        assert all(type(room[k]) is int for k in SHAPE - {"room_id", "room_label", "unanswered"})
        code, out, _ = run(capsys, "-c", str(config), "--json", "--days", "30")
        assert json.loads(out)["rooms"][0]["asked"] == 4
    finally:
        log.close()


def test_text_names_each_room_and_links_each_asking_event(tmp_path, capsys):
    config = make_data_dir(tmp_path)
    fill(config).close()
    code, out, _ = run(capsys, "-c", str(config))
    assert code == 0
    assert f"#help:example.org ({ROOM}): 3 asked, 1 answered, 2 nothing matches" in out
    assert "2x where is the kestrel mirror" in out
    assert "https://matrix.to/#/%21moderated%3Aexample.org/%24q1?via=example.org" in out
    assert "https://matrix.to/#/%21moderated%3Aexample.org/%24q2?via=example.org" in out


def test_a_room_and_the_days_are_checked(tmp_path, capsys):
    config = make_data_dir(tmp_path)
    code, _, err = run(capsys, "-c", str(config), "--room", "!elsewhere:example.org")
    assert code == 2 and "not on the allowlist" in err
    code, _, err = run(capsys, "-c", str(config), "--days", "0")
    assert code == 2 and "--days" in err
    code, out, err = run(capsys, "-c", str(config), "--days", "90", "--json")
    assert code == 0 and "moderation.keep_days" in err
    # No event log yet (the service never ran): every allowlisted room, at zero.
    assert json.loads(out) == {
        "rooms": [
            {
                "room_id": ROOM,
                "room_label": "",
                "asked": 0,
                "answered": 0,
                "nothing_matched": 0,
                "up": 0,
                "down": 0,
                "solved": 0,
                "unanswered": [],
            }
        ]
    }
