"""The keyword index in the event log (indexer/store/eventlog/keywords.py): written in the
text's own transactions, ranked as the scan of the text ranks, gone with the text, built
once (resumably) for an event log from before it. On SQLite and PostgreSQL."""

from __future__ import annotations

import random
import sqlite3

import pytest

from matrix_sources.indexer.pipeline.chunker import build_windows
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID, Window
from matrix_sources.indexer.search.lexical import LexicalRanker, matching
from matrix_sources.indexer.search.searcher import _lexical_ranker
from matrix_sources.indexer.store.eventlog import keywords
from matrix_sources.indexer.store.eventlog.keywords_build import KeywordBuild
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from matrix_sources.indexer.tokens import base_of
from tests.storekit import index

ROOMS = (RoomID("!a:example.org"), RoomID("!b:example.org"))
WORDS = (
    "partition partitions partitioning mount nfs share grub boot kernel panic "
    "ECONNREFUSED max_bytes nginx.conf 2.6.8 c++ utf-8 don't 数据库 备份 서버가 "
    "docker-machine postgres backup restore stopped spinning sudo apt install"
).split()
CANARY = "zqkwcanary48"


def _store(tmp_path, where) -> ChromaStore:
    return ChromaStore(path=tmp_path / "chroma", eventlog=EventLog(where))


def _windows(n: int, seed: int = 48) -> list[Window]:
    rng = random.Random(seed)
    out: list[Window] = []
    for r, room in enumerate(ROOMS):
        msgs = [
            Message(
                EventID(f"$r{r}m{i}"),
                room,
                UserID(f"@u{i % 3}:example.org"),
                1_700_000_000_000 + i * 60_000,
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))),
            )
            for i in range(n)
        ]
        out += build_windows(msgs, ChunkPolicy(max_bytes=120, gap_ms=10**9))
    return out


def _indexed(store: ChromaStore, windows: list[Window]) -> None:
    index(store, windows, [[1.0, float(i % 7), 0.5] for i in range(len(windows))])


def _scan(store: ChromaStore) -> LexicalRanker:
    ranker = _lexical_ranker(store)
    return LexicalRanker(
        lambda base, prefix, where: matching(store, base, prefix, where),
        ranker.fetch,
        store.count,
        None,
    )


def _df(store: ChromaStore, word: str) -> int:
    got = store.eventlog.keywords.postings(*base_of(word))
    assert got is not None
    return len(got[0])


QUERIES = [
    "partition",
    "partitions mount",
    "ECONNREFUSED",
    "max_bytes",
    "bytes",
    "nginx.conf",
    "2.6",
    "c++",
    "数据库",
    "서버",
    "spin",
    "stop",
    "docker",
    "restore backup postgres",
    "kernel panic boot",
    "nothing-here",
]


@pytest.mark.parametrize("seg_bits", [keywords.SEG_BITS, 4])
def test_the_index_ranks_as_the_scan_of_the_text_ranks(
    tmp_path, eventlog_db, seg_bits, monkeypatch
):
    # Segments of 16 windows too: a term's postings read from every segment.
    from matrix_sources.indexer.store.eventlog import keyword_reads

    monkeypatch.setattr(keywords, "SEG_BITS", seg_bits)
    monkeypatch.setattr(keyword_reads, "SEG_BITS", seg_bits)
    store = _store(tmp_path, eventlog_db)
    _indexed(store, _windows(150))
    ranker = _lexical_ranker(store)
    assert ranker.index is not None and ranker.index.ready()
    scan = _scan(store)
    where_forms = [
        None,
        {"room_id": ROOMS[1]},
        {"$and": [{"room_id": ROOMS[0]}, {"corpus": "chat"}]},
        {"room_id": {"$in": [ROOMS[0], ROOMS[1]]}},  # a room's upgrade chain
        {"$and": [{"room_id": {"$in": [ROOMS[1]]}}, {"corpus": "chat"}]},
    ]
    # The index answers a chain's filter itself (not handed to the scan).
    assert ranker.index.postings("partition", True, where_forms[3]) is not None
    for q in QUERIES:
        for where in where_forms:
            assert ranker.rank(q, 20, where) == scan.rank(q, 20, where), (q, where)
    # A word every window may hold: ties at the prefilter's floor broken by window id.
    assert ranker.rank("sudo", 200) == scan.rank("sudo", 200)
    assert ranker.df("partitions") == scan.df("partitions") > 0


@pytest.mark.parametrize(("seek_cost", "seg_bits"), [(0, keywords.SEG_BITS), (0, 4), (10**9, 4)])
def test_a_common_word_sought_among_the_windows_that_can_rank_ranks_as_read_whole(
    tmp_path, eventlog_db, seek_cost, seg_bits, monkeypatch
):
    # MaxScore (lexical._bounded_reads), made to engage on a small index: the best
    # PREFILTER by coarse score, their ties and the BM25 order stay the scan's, whether
    # the common words are then sought (seek_cost 0: in one segment, or in many of 16
    # windows) or read whole (10**9).
    from matrix_sources.indexer.search import lexical
    from matrix_sources.indexer.store.eventlog import keyword_reads
    from matrix_sources.indexer.store.eventlog.keyword_reads import KeywordIndex

    monkeypatch.setattr(keywords, "SEG_BITS", seg_bits)
    monkeypatch.setattr(keyword_reads, "SEG_BITS", seg_bits)

    monkeypatch.setattr(lexical, "PREFILTER", 6)
    monkeypatch.setattr(lexical, "BOUNDED_FROM", 4)
    monkeypatch.setattr(lexical, "SEEK_COST", seek_cost)
    sought: list[str] = []
    among = KeywordIndex.postings_among

    def spied(self, base, prefix, docs):
        sought.append(base)
        return among(self, base, prefix, docs)

    monkeypatch.setattr(KeywordIndex, "postings_among", spied)
    store = _store(tmp_path, eventlog_db)
    _indexed(store, _windows(150))
    ranker, scan = _lexical_ranker(store), _scan(store)
    rng = random.Random(51)
    asked = QUERIES + [" ".join(rng.sample(WORDS, rng.randint(2, 4))) for _ in range(150)]
    for q in asked:
        assert ranker.rank(q, 20) == scan.rank(q, 20), q
    assert (len(sought) > 20) if seek_cost == 0 else not sought


def test_a_reference_chunk_is_indexed_with_its_text_and_leaves_with_it(tmp_path, eventlog_db):
    store = _store(tmp_path, eventlog_db)
    store.upsert_references(
        ["r1", "r2"],
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
        ["how to mount an nfs share", "grub rescue prompt"],
        [{"corpus": "reference", "ref_corpus": "docs"}] * 2,
    )
    ranker = _lexical_ranker(store)
    assert ranker.rank("nfs", 5, {"corpus": "reference"}) == ["r1"]
    assert ranker.rank("nfs", 5, {"corpus": "chat"}) == []
    store.delete(["r1"])
    assert _df(store, "nfs") == 0 and _df(store, "grub") == 1


def _one(store: ChromaStore, sender: str = "@c:example.org") -> Window:
    m = Message(
        EventID("$canary"), ROOMS[0], UserID(sender), 1_700_000_000_000, f"secret {CANARY} here"
    )
    w = Window("wcanary", ROOMS[0], (m,))  # type: ignore[arg-type]
    _indexed(store, [w])
    return w


def _files_with(folder, needle: str) -> list[str]:
    raw = needle.encode()
    return [str(p) for p in folder.rglob("*") if p.is_file() and raw in p.read_bytes()]


def _redact(log: EventLog) -> None:
    from matrix_sources.indexer.ingest.events import RedactionEvent
    from matrix_sources.indexer.ingest.history import History

    History(log).apply(
        [RedactionEvent(ROOMS[0], EventID("$x"), UserID("@c:example.org"), EventID("$canary"), 9)]
    )


def _edit_away(log: EventLog) -> None:
    from matrix_sources.indexer.ingest.events import EditEvent
    from matrix_sources.indexer.ingest.history import History

    History(log).apply(
        [EditEvent(ROOMS[0], EventID("$e"), UserID("@c:example.org"), EventID("$canary"), "ok", 9)]
    )


WITHDRAWALS = {
    "redacted": _redact,
    "forgotten": lambda log: log.history.forget_sender(UserID("@c:example.org"), 9, "test"),
    "expired": lambda log: log.history.expire_before(ROOMS[0], 2_000_000_000_000),
    "purged": lambda log: log.purge_room(ROOMS[0]),
    "edited": _edit_away,
}


@pytest.mark.parametrize("how", sorted(WITHDRAWALS))
def test_a_withdrawn_message_leaves_the_index_with_its_text_and_no_file_holds_it(tmp_path, how):
    folder = tmp_path / "data"
    folder.mkdir()
    store = _store(folder, folder / "eventlog.sqlite3")
    _indexed(store, _windows(20))
    _one(store)
    log = store.eventlog
    assert _df(store, CANARY) == 1
    with sqlite3.connect(folder / "eventlog.sqlite3") as conn:  # the index holds it
        assert conn.execute("SELECT COUNT(*) FROM kw_postings WHERE key = ?", (CANARY,)).fetchone()
    log.truncate_wal()
    assert _files_with(folder, CANARY)  # the scan below can see it
    WITHDRAWALS[how](log)
    assert _df(store, CANARY) == 0  # in the withdrawal's own transaction
    assert _lexical_ranker(store).rank(CANARY, 5) == []
    log.truncate_wal()  # what a compaction does after a withdrawal (purges: at once)
    assert _files_with(folder, CANARY) == []
    assert _df(store, "partition") > 0  # the rest stays


def test_a_rechunk_moves_the_words_to_the_new_window(tmp_path, eventlog_db):
    from matrix_sources.indexer.store.eventlog.rows import WindowMove

    store = _store(tmp_path, eventlog_db)
    w = _one(store)
    store.upsert([Window("wnew", w.room_id, w.messages)], [[1.0, 2.0, 3.0]])  # type: ignore[arg-type]
    store.eventlog.rewindow_many([WindowMove("wcanary", "wnew")])  # type: ignore[arg-type]
    assert _lexical_ranker(store).rank(CANARY, 5) == ["wnew"]
    store.eventlog.requeue_windows(["wnew"])  # type: ignore[list-item]
    assert _df(store, CANARY) == 0
    _indexed(store, _windows(5))
    store.eventlog.requeue_all()  # a rebuild: nothing is indexed until embedded again
    assert store.eventlog.keywords.count() == 0


def test_an_event_log_from_before_the_index_is_built_once_resumably(tmp_path, eventlog_db):
    store = _store(tmp_path, eventlog_db)
    _indexed(store, _windows(60))
    want = {q: _lexical_ranker(store).rank(q, 20) for q in QUERIES}
    log = store.eventlog
    with log.transaction() as cur:  # as migration 16 leaves a log that held windows
        keywords.reset(cur)
    assert not log.keywords.ready()
    # Meanwhile the leg scans the text: the same answers.
    assert _lexical_ranker(store).index is None
    assert {q: _lexical_ranker(store).rank(q, 20) for q in QUERIES} == want
    seen: list[tuple[int, int]] = []

    def stop_after_two_pages(done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        keywords.build(log.db, stop_after_two_pages, page=3)
    assert seen == [(3, len(log.window_ids())), (6, len(log.window_ids()))]
    assert not log.keywords.ready() and 0 < log.keywords.count() < len(log.window_ids())
    # A window written meanwhile is indexed by its own write.
    extra = _windows(3, seed=7)[0]
    _indexed(store, [Window("wextra", extra.room_id, extra.messages)])  # type: ignore[arg-type]
    resumed: list[tuple[int, int]] = []
    assert keywords.build(log.db, lambda d, t: resumed.append((d, t)), page=3) > 0
    assert resumed[0][0] == 9 and resumed[-1][0] == resumed[-1][1] == len(log.window_ids())
    assert log.keywords.ready() and log.keywords.count() == len(log.window_ids())
    ranker = _lexical_ranker(store)
    assert ranker.index is not None
    assert {q: ranker.rank(q, 20) for q in QUERIES} == {
        q: _scan(store).rank(q, 20) for q in QUERIES
    }
    assert keywords.build(log.db) == 0  # ready: nothing to do


def test_migration_16_builds_nothing_for_a_new_log_and_marks_an_old_one(tmp_path, caplog):
    new = EventLog(tmp_path / "new.sqlite3")
    assert new.keywords.ready()
    path = tmp_path / "old.sqlite3"
    store = _store(tmp_path / "s", path)
    _indexed(store, _windows(10))
    store.eventlog.close()
    with sqlite3.connect(path) as conn:  # the log as release 15 left it
        conn.execute("DROP TABLE kw_postings")
        conn.execute("DROP TABLE kw_docs")
        conn.execute("DELETE FROM meta WHERE key LIKE 'keywords%'")
        conn.execute("PRAGMA user_version = 15")
    old = EventLog(path)
    assert not old.keywords.ready() and old.keywords.count() == 0
    build = KeywordBuild(old.db)
    assert build.state == {"ready": False}
    with caplog.at_level("INFO", logger="matrix_sources"):
        build.run()
    assert build.state == {"ready": True} and build.done.is_set()
    assert old.keywords.count() == len(old.window_ids())
    said = [r.getMessage() for r in caplog.records]
    assert "keyword_index_progress" in said and "keyword_index_ready" in said


def test_a_prefix_read_seeks_each_segment_by_its_range(tmp_path):
    """A stem's read is a range of keys in each segment's tree, never a walk of every
    key of the segment (a range inside an OR is not sought by SQLite: 300 ms a term at
    100,000 windows). The plan is asked of the database itself."""
    from matrix_sources.indexer.store.eventlog.keyword_reads import _matching

    store = _store(tmp_path, tmp_path / "e.sqlite3")
    _indexed(store, _windows(30))
    with store.eventlog.db.locked() as conn:
        for where in (None, {"corpus": "chat"}, {"room_id": ROOMS[0]}):
            sql, args = _matching(conn, *base_of("partitions"), where)
            plan = " ".join(
                str(r[-1]) for r in conn.execute(f"EXPLAIN QUERY PLAN SELECT p.doc {sql}", args)
            )
            assert "key>? AND key<?" in plan, plan


def test_counts_are_kept_until_the_index_grows_by_a_percent(tmp_path):
    """idf's counts (the windows, a term's df) are taken again once more than
    STALE_SHARE of new windows came: a common word's count is 100 to 300 ms at a
    million windows, and idf barely moves meanwhile."""
    from matrix_sources.indexer.store.eventlog.keyword_reads import STALE_SHARE

    store = _store(tmp_path, tmp_path / "e.sqlite3")
    windows = _windows(600)
    more = [
        Window(
            f"wmore{i}",
            ROOMS[0],
            (
                Message(
                    EventID(f"$more{i}"),
                    ROOMS[0],
                    UserID("@u:x"),
                    1_800_000_000_000 + i,
                    "kernel partition",
                ),
            ),
        )  # type: ignore[arg-type]
        for i in range(40)
    ]
    _indexed(store, windows)
    idx = store.eventlog.keywords
    total, df = idx.count(), idx.df(*base_of("partition"))
    assert total == len(windows) and total * STALE_SHARE < 40
    _indexed(store, more[:1])
    assert (idx.count(), idx.df(*base_of("partition"))) == (total, df)  # kept
    _indexed(store, more)
    assert idx.count() == total + 40 and idx.df(*base_of("partition")) == _df(store, "partition")


def test_a_common_terms_count_is_estimated_from_a_sample_of_segments(
    tmp_path, eventlog_db, monkeypatch
):
    """At scale a term held by many windows is counted in SAMPLE_SEGMENTS segments and
    scaled to the index (a common stem's exact count took up to 120 ms at a million
    windows); rarer terms, filtered counts and small indexes are counted exactly."""
    from matrix_sources.indexer.store.eventlog import keyword_reads

    monkeypatch.setattr(keywords, "SEG_BITS", 2)  # 4 windows a segment: 51 segments
    monkeypatch.setattr(keyword_reads, "SEG_BITS", 2)
    monkeypatch.setattr(keyword_reads, "SAMPLE_SEGMENTS", 5)
    monkeypatch.setattr(keyword_reads, "ESTIMATED_FROM", 3)

    def window(i: int, text: str) -> Window:
        room = ROOMS[i % 2]
        msg = Message(EventID(f"$s{i}"), room, UserID("@u:x"), 1_800_000_000_000 + i, text)
        return Window(f"ws{i:04d}", room, (msg,))  # type: ignore[arg-type]

    texts = [
        " ".join(
            ["common" if i % 2 == 0 else "other"]
            + (["skewed"] if i < 4 else [])  # the first segments only: the sample's first
            + (["rare"] if i in (100, 101) else [])  # in no sampled segment
        )
        for i in range(200)
    ]
    store = _store(tmp_path, eventlog_db)
    _indexed(store, [window(i, t) for i, t in enumerate(texts)])
    idx = store.eventlog.keywords
    exact = {w: _df(store, w) for w in ("common", "skewed", "rare", "absent")}
    assert exact == {"common": 100, "skewed": 4, "rare": 2, "absent": 0}
    assert abs(idx.df(*base_of("common")) - 100) <= 10  # estimated: half of every segment
    assert idx.df(*base_of("skewed")) > 4 * 5  # estimated from the one segment that holds it
    assert idx.df(*base_of("rare")) == 2  # under ESTIMATED_FROM in the sample: exact
    assert idx.df(*base_of("absent")) == 0
    assert idx.df(*base_of("skewed"), where={"room_id": ROOMS[0]}) == 2  # filtered: exact
    # An index of SAMPLE_SEGMENTS segments or fewer is counted exactly.
    monkeypatch.setattr(keyword_reads, "SAMPLE_SEGMENTS", 64)
    assert keyword_reads.KeywordIndex(store.eventlog.db).df(*base_of("skewed")) == 4
