"""`--room here` in an upgraded room covers its chain, and a hit's room label is the
room's label now (indexer/search/searcher.py): both legs, the keyword leg's postings and
its scan alike."""

from __future__ import annotations

from matrix_sources.indexer.search.query import SourceQuery
from matrix_sources.indexer.search.searcher import Searcher
from matrix_sources.indexer.store.eventlog.keyword_reads import _wanted
from tests.indexer.search.test_search import OTHER, ROOM, chat  # noqa: F401  (the fixture)


def chained(room):
    return [ROOM, OTHER] if room == OTHER else [room]


def test_a_room_filter_covers_the_rooms_upgraded_from(chat):  # noqa: F811
    store, emb, _ = chat
    alone = Searcher(emb, store).search(SourceQuery.build(["partition"], 5, room_id=OTHER))
    assert [h.first_event_id for h in alone] == ["$p3"]
    s = Searcher(emb, store, chain_of=chained)
    hits = s.search(SourceQuery.build(["partition"], 5, room_id=OTHER))
    assert {h.first_event_id for h in hits[:2]} == {"$p1", "$p3"}
    assert {h.room_id for h in hits} == {ROOM, OTHER}  # each cited by its own room
    # The predecessor asked alone stays itself.
    hits = s.search(SourceQuery.build(["partition"], 5, room_id=ROOM))
    assert {h.room_id for h in hits} == {ROOM}


def test_a_hit_carries_the_rooms_label_now(chat):  # noqa: F811
    store, emb, _ = chat
    before = Searcher(emb, store).search(SourceQuery.build(["partition"], 2))
    assert all(h.room_label != "#renamed:x" for h in before)
    labels = {ROOM: "#renamed:x"}
    hits = Searcher(emb, store, label_of=lambda r: labels.get(r, "")).search(
        SourceQuery.build(["partition"], 2)
    )
    got = {h.first_event_id: h.room_label for h in hits}
    assert (
        got["$p1"] == "#renamed:x"
        and got["$p3"] == before[[h.first_event_id for h in before].index("$p3")].room_label
    )


def test_the_postings_read_a_chain_filter():
    assert _wanted({"room_id": {"$in": ["!a", "!b"]}}) == (("!a", "!b"), None)
    assert _wanted({"$and": [{"room_id": {"$in": ["!a"]}}, {"corpus": "chat"}]}) == (
        ("!a",),
        "chat",
    )
    assert _wanted({"room_id": {"$nin": ["!a"]}}) is None
    assert _wanted({"corpus": {"$in": ["chat"]}}) is None
