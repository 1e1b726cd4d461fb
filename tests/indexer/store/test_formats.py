"""One writer per stored format: a collection point's metadata (store.point_metadata,
for chat windows and reference chunks alike) and a hit as recorded (Hit.to_json, read
back by Hit.from_json, which answer edits use)."""

from __future__ import annotations

from dataclasses import replace

from matrix_sources.indexer.derived.reference import Chunk, Section, chunk_metadata
from matrix_sources.indexer.records import (
    EventID,
    Hit,
    Line,
    Message,
    RefSource,
    RoomID,
    UserID,
    Window,
    WindowID,
)
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from matrix_sources.indexer.store.vectors.points import window_metadata

ROOM = RoomID("!r:example.org")
COMMON = {
    "room_id",
    "room_label",
    "corpus",
    "event_ids",
    "first_event_id",
    "last_event_id",
    "senders",
    "ts_first",
    "ts_last",
    "n_events",
}


def window() -> Window:
    return Window(
        WindowID("w1"),
        ROOM,
        (
            Message(EventID("$a"), ROOM, UserID("@a:x"), 10, "how do I rotate the key"),
            Message(EventID("$b"), ROOM, UserID("@b:x"), 20, "with the rotate command"),
            Message(EventID("$c"), ROOM, UserID("@a:x"), 30, "thanks"),
        ),
        "#ops",
    )


def chunk() -> Chunk:
    section = Section(
        "ops", "keys.md", "Keys › Rotation", "ops/keys.md#Keys › Rotation", "rotate monthly"
    )
    return Chunk("rabc", section, 2, "rotate monthly")


def test_windows_and_reference_chunks_share_one_metadata_format():
    w, r = window_metadata(window()), chunk_metadata(chunk(), 99)
    assert w == {
        "room_id": ROOM,
        "room_label": "#ops",
        "corpus": "chat",
        "event_ids": '["$a", "$b", "$c"]',
        "first_event_id": "$a",
        "last_event_id": "$c",
        "senders": '["@a:x", "@b:x"]',
        "ts_first": 10,
        "ts_last": 30,
        "n_events": 3,
    }
    assert set(w) == COMMON and set(r) - COMMON == {
        "ref_corpus",
        "ref_file",
        "ref_heading",
        "ref_section",
        "ref_chunk",
    }
    assert {k: r[k] for k in COMMON} == {
        "room_id": "",
        "room_label": "keys.md › Keys › Rotation",
        "corpus": "reference",
        "event_ids": "[]",
        "first_event_id": "",
        "last_event_id": "",
        "senders": "[]",
        "ts_first": 99,
        "ts_last": 99,
        "n_events": 0,
    }


def test_both_kinds_read_back_through_the_store(tmp_path):
    store = ChromaStore(path=tmp_path / "chroma")
    store.upsert([window()], [[1.0, 0.0, 0.0]])
    c = chunk()
    store.upsert_references([c.chunk_id], [[0.0, 1.0, 0.0]], [c.text], [chunk_metadata(c, 99)])
    got = {s.window_id: s for s in store.get()}
    assert got["w1"].event_ids == ("$a", "$b", "$c") and got["w1"].senders == ("@a:x", "@b:x")
    assert (got["w1"].ts_first, got["w1"].ts_last, got["w1"].ref) == (10, 30, None)
    assert got["rabc"].ref == RefSource("ops", "keys.md", "Keys › Rotation")
    assert got["rabc"].event_ids == () and got["rabc"].corpus == "reference"


def test_a_recorded_hit_reads_back_as_the_hit_it_was():
    line = Line(EventID("$b"), UserID("@b:x"), 20, "with the rotate command")
    hit = Hit(
        WindowID("w1"),
        ROOM,
        "#ops",
        "chat",
        (EventID("$a"), EventID("$b")),
        (UserID("@a:x"), UserID("@b:x")),
        10,
        20,
        0.03,
        "the text",
        similarity=0.7,
        ref=RefSource("ops", "keys.md", "Keys"),
        shown=(line,),
    )
    back = Hit.from_json(hit.to_json(), shown=hit.shown)
    assert back == hit
    # What answers.py records drops the text and the shown lines; their ids stay.
    entry = {k: v for k, v in hit.to_json().items() if k not in ("text", "shown")}
    assert Hit.from_json(entry) == replace(hit, text="", shown=())
