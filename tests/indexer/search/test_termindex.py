"""The lexical leg's in-memory postings (indexer/search/termindex.py) against the scan
they stand in for (lexical.matching's test over each body, by the same tokenizer): the
same windows for every term, the same BM25 order, and in step with the store's writes."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.models.turns import ModelTurns
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window, WindowID
from matrix_sources.indexer.search.lexical import LexicalRanker, base_of, stem, terms
from matrix_sources.indexer.search.termindex import TermIndex, matchable
from matrix_sources.indexer.search.termindex_build import start_term_index
from matrix_sources.indexer.search.tokens import keys, matches
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.storekit import index, open_store
from tests.strength import examples

# Words that meet as stems and prefixes, a short one, digits, odd characters, scripts.
VOCAB = [
    "1.2.3.4.5.6.7",
    "a.a.a",
    "a.a",
    "c+",
    "v2.6",
    "2.6",
    "2.6.8.",
    "c#",
    "x.y'z",
    "partition",
    "partitions",
    "partitioning",
    "Partitioned",
    "grub",
    "GRUB2",
    "rar",
    "rare",
    "ext3",
    "2.6.8",
    "c++",
    "don't",
    "wifi",
    "wi-fi",
    "foo_bar",
    "menu.lst",
    "/boot/grub/menu.lst",
    "installing",
    "installed",
    "café",
    "naïve",
    "x",
    "spinning",
    "spin",
    "[bracket]",
    "the",
    "nvidia-glx",
    "ECONNREFUSED",
    "E_CODES",
    "数据库",
    "サーバー",
    "서버가",
    "сервер",
    "ＡＢＣ",
]
# A reference chunk's text (a window's bodies come typed: windows_written), lines that
# look like chat or markup included: all of it is matched.
body = st.lists(
    st.sampled_from(VOCAB) | st.text("abgrpstu0123 .-_'+#", max_size=8), min_size=0, max_size=8
).map(" ".join)
line = body | st.just("[link] partition grub") | st.just("[10:00] odd sender: rare")
document_text = st.lists(line, min_size=1, max_size=5).map("\n".join)
query_word = (
    st.sampled_from(VOCAB)
    | st.text("abgrpstu0123", min_size=1, max_size=6)
    | st.text("ab23.+#'-_", min_size=1, max_size=6)
)


def scan_ids(docs: dict[str, str], term: str) -> set[str]:
    base, prefix = base_of(term)
    return {
        wid
        for wid, doc in docs.items()
        if any(matches(base, prefix, k) for part in matchable([doc]) for k in keys(part))
    }


def indexed(docs: dict[str, str], metas: dict[str, dict] | None = None) -> TermIndex:
    index = TermIndex()
    index.texts_written(
        list(docs),
        list(docs.values()),
        [(metas or {}).get(w, {"room_id": "!r:x", "corpus": "chat"}) for w in docs],
    )
    index.ready.set()
    return index


@pytest.mark.slow  # property test at full strength: in the full run
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.text("abcdef", min_size=1, max_size=4), document_text, min_size=1, max_size=8
    ),
    st.lists(query_word, min_size=1, max_size=6),
)
def test_postings_find_exactly_what_the_scan_matches(docs, words):
    index = indexed(docs)
    for word in words:
        for term in terms(word):
            base, prefix = base_of(term)
            got = index.postings(base, prefix)
            assert got is not None and set(got) == scan_ids(docs, term), (term, docs)
            for wid, tf in got.items():  # the count BM25 uses: the keys it matches
                n = sum(
                    1
                    for part in matchable([docs[wid]])
                    for k in keys(part)
                    if matches(base, prefix, k)
                )
                assert tf == min(n, 63)


def python_ranker(docs: dict[str, str], index: TermIndex | None) -> LexicalRanker:
    def match(base: str, prefix: bool, where: dict | None) -> list[str]:
        return [
            w
            for w, d in docs.items()
            if any(matches(base, prefix, k) for part in matchable([d]) for k in keys(part))
        ]

    return LexicalRanker(match, lambda ids: {w: (docs[w],) for w in ids}, lambda: len(docs), index)


@pytest.mark.slow  # property test at full strength: in the full run
@settings(max_examples=examples(200), deadline=None)
@given(
    st.dictionaries(
        st.text("abcdef", min_size=1, max_size=4), document_text, min_size=1, max_size=12
    ),
    st.lists(query_word, min_size=1, max_size=4).map(" ".join),
)
def test_the_leg_ranks_the_same_from_postings_as_from_the_scan(docs, query):
    with_index = python_ranker(docs, indexed(docs)).rank(query, 10)
    without = python_ranker(docs, None).rank(query, 10)
    assert with_index == without


# Ids that share their first 8 bytes (id_key alike) or are prefixes of each other.
tied_id = st.tuples(
    st.sampled_from(["w", "wabcdefg", "wabcdefgh", "r", "w\u00e9"]), st.text("0a\u00e9", max_size=3)
).map("".join)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.dictionaries(
        tied_id, st.sampled_from(["grub grub", "grub", "wifi grub", "x"]), min_size=1, max_size=12
    ),
    st.sampled_from(["grub", "wifi grub", "grub x"]),
    st.integers(1, 4),
)
def test_ties_past_the_prefilter_pool_go_to_the_smallest_ids_either_way(docs, query, pool):
    """Most windows share a score when they hold one common word: the pool takes the
    smallest ids of them, narrowed by id_key on the postings' side."""
    from unittest import mock

    with mock.patch("matrix_sources.indexer.search.lexical.PREFILTER", pool):
        with_index = python_ranker(docs, indexed(docs)).rank(query, 10)
        without = python_ranker(docs, None).rank(query, 10)
    assert with_index == without and len(with_index) <= pool


@given(st.text(max_size=12), st.text(max_size=12))
def test_id_key_keeps_the_order_of_ids(a, b):
    from matrix_sources.indexer.search.termindex import id_key

    a, b = sorted((a, b))
    assert id_key(a) <= id_key(b)


def test_writes_replace_remove_filter_and_compact():
    index = TermIndex()
    index.ready.set()
    chat = {"room_id": "!a:x", "corpus": "chat"}
    index.texts_written(
        ["w1", "w2"],
        ["grub partition", "grub again"],
        [chat, {"room_id": "!b:x", "corpus": "chat"}],
    )
    assert set(index.postings("grub", False)) == {"w1", "w2"}
    assert set(index.postings("grub", False, {"room_id": "!b:x"})) == {"w2"}
    assert index.postings("grub", False, {"$and": [{"room_id": "!a:x"}, {"corpus": "chat"}]}) == {
        "w1": 1
    }
    # A room's upgrade chain: its rooms together; another operator is Chroma's to answer.
    assert index.postings("grub", False, {"room_id": {"$in": ["!a:x"]}}) == {"w1": 1}
    assert set(index.postings("grub", False, {"room_id": {"$in": ["!a:x", "!b:x"]}})) == {
        "w1",
        "w2",
    }
    assert index.postings("grub", False, {"room_id": {"$nin": ["!a:x"]}}) is None
    # A redaction re-upserts the window without the word: it stops matching at once.
    index.texts_written(["w1"], ["[redacted] partition"], [chat])
    assert set(index.postings("grub", False)) == {"w2"}
    assert set(index.postings(stem("partitions"), True)) == {"w1"}
    index.remove(["w2"])
    assert index.postings("grub", False) == {} and index.count() == 1
    # Many rewrites of an open window: dead slots are dropped, answers unchanged.
    for i in range(25_000):
        index.texts_written(["open"], [f"grub {i}"], [chat])
    s = index.stats()
    assert s["windows"] == 2 and s["dead_slots"] < 20_000
    assert set(index.postings("grub", False)) == {"open"}
    assert index.postings("24999", False) == {"open": 1}
    assert index.postings("5", False) == {}
    assert index.lengths(["open", "w1"]) == {"open": 2, "w1": 2}
    index.clear()
    assert index.count() == 0 and index.postings("grub", False) == {}


def test_not_ready_means_ask_chroma():
    index = TermIndex()
    index.texts_written(["w"], ["grub"], [{}])
    assert index.postings("grub", False) is None


def test_build_lets_writes_made_meanwhile_win():
    index = TermIndex()
    stored = {f"w{i}": f"old word{i}" for i in range(6)}
    meta = {"room_id": "!a:x", "corpus": "chat"}

    def pages(ids):
        first, rest = ids[:3], ids[3:]
        docs = [matchable([stored[i]]) for i in first]  # read before the writes below
        # The pipeline writes while the page is in flight: w1 rewritten, w2 deleted,
        # w6 new (not in the listed ids: it reaches the index through the write).
        stored["w1"] = "new word1"
        index.texts_written(["w1"], [stored["w1"]], [meta])
        del stored["w2"]
        index.remove(["w2"])
        stored["w6"] = "new word6"
        index.texts_written(["w6"], [stored["w6"]], [meta])
        yield first, docs, [meta] * 3
        yield rest, [matchable([stored[i]]) for i in rest], [meta] * len(rest)

    assert index.build(list(stored), pages)
    assert index.ready.is_set()
    assert set(index.postings("old", False)) == {"w0", "w3", "w4", "w5"}
    assert set(index.postings("new", False)) == {"w1", "w6"}
    assert index.count() == 6


def test_a_reset_during_the_build_stops_it_and_leaves_what_came_after():
    index = TermIndex()

    def pages(ids):
        yield ["a"], [["before"]], [{}]
        index.clear()  # a rebuild emptied the collection
        index.texts_written(["b"], ["after"], [{}])
        yield ["c"], [["stale"]], [{}]

    assert index.build(["a", "c"], pages) is False
    assert index.ready.is_set()
    assert set(index.postings("after", False)) == {"b"}
    assert index.postings("before", False) == {} and index.postings("stale", False) == {}


def test_a_search_running_goes_before_the_builds_next_page():
    """Before each page the build waits while a search waits or runs: pure Python, a
    page holds the GIL (at a million windows the build takes minutes; `!sources` took
    2.1 s at p95 meanwhile)."""
    turns, index, order = ModelTurns(), TermIndex(), []
    searching = threading.Event()

    def search() -> None:
        with turns.query():
            searching.set()
            for _ in range(100_000):  # until the build pauses for it (bounded)
                if turns.pausing:
                    break
                time.sleep(0)  # a yield, no wait
            order.append("search")

    asker = threading.Thread(target=search)

    def pages(ids):
        for i in ids:
            order.append(f"page {i}")
            if i == "a":  # a search starts while the first page is read
                asker.start()
                searching.wait()
            yield [i], [[f"word{i}"]], [{}]

    assert index.build(["a", "b", "c"], pages, turns.pause_for_queries)
    asker.join()
    assert order == ["page a", "search", "page b", "page c"]
    assert set(index.postings("worda", False)) == {"a"} and index.count() == 3


def _make_window(i: int, room: str, body: str) -> Window:
    m = Message(
        EventID(f"$e{i}"),
        RoomID(room),
        UserID("@alice:example.org"),
        1_700_000_000_000 + i * 1000,
        body,
    )
    return Window(WindowID(f"{room}/$e{i}"), RoomID(room), (m,), room_label="Room")


def test_the_store_keeps_its_postings_in_step_and_the_leg_matches_chroma(tmp_path):
    from matrix_sources.indexer.search.searcher import Searcher, SourceQuery, _lexical_ranker

    terms_index = TermIndex()  # followed by the store from its opening, as the service's
    store = open_store(tmp_path, follower=terms_index)
    emb = HashEmbedder()
    bodies_ = [
        "how do I resize a partition with gparted",
        "grub rescue prompt after update",
        "partitioning the new disk",
        "nvidia driver blank screen",
        "wifi drops",
    ]
    windows = [
        _make_window(i, "!a:example.org" if i % 2 else "!b:example.org", b)
        for i, b in enumerate(bodies_)
    ]
    index(store, windows[:3], emb.encode(bodies_[:3]))
    assert start_term_index(terms_index, store.eventlog, page=2) is terms_index
    assert terms_index.ready.wait(30)
    index(store, windows[3:], emb.encode(bodies_[3:]))
    store.delete([windows[0].window_id])
    # No postings: scans the event log's text.
    chroma_only = ChromaStore(path=tmp_path / "chroma", eventlog=store.eventlog)
    for query, where in [
        ("partition", None),
        ("grub", None),
        ("nvidia screen", None),
        ("partition", {"room_id": "!b:example.org"}),
        ("resize", None),
    ]:
        ours = _lexical_ranker(store, terms_index)
        assert ours.index is terms_index
        theirs = _lexical_ranker(chroma_only, None)
        assert theirs.index is None
        assert ours.rank(query, 10, where) == theirs.rank(query, 10, where), query
    assert _lexical_ranker(store, terms_index).rank("resize", 10) == []  # its window went
    hits = Searcher(emb, store, terms=terms_index).search(SourceQuery.build(["grub"]))
    assert hits and hits[0].window_id == windows[1].window_id
    store.reset()
    assert terms_index.count() == 0


def test_a_window_is_matched_in_its_bodies_never_its_senders_or_times():
    index = TermIndex()
    index.ready.set()
    m = Message(
        EventID("$e1"),
        RoomID("!r:x"),
        UserID("@grub:example.org"),
        1_700_000_000_000,
        "partition help\nsecond line",
    )
    index.windows_written([Window(WindowID("!r:x/$e1"), RoomID("!r:x"), (m,), "Room")])
    assert index.postings("grub", False) == {}
    assert index.postings("2023", False) == {}
    assert set(index.postings("second", False)) == {"!r:x/$e1"}


def test_a_large_index_waits_for_its_postings_instead_of_scanning(tmp_path, monkeypatch):
    """While the service builds its postings, a scan of the event log would cost seconds
    a term past SCAN_WINDOWS_MAX windows: the leg finds nothing and weighs every term
    the same meanwhile, and scans below it; built postings answer either way."""
    from matrix_sources.indexer.search import searcher

    store = open_store(tmp_path)
    emb = HashEmbedder()
    bodies_ = ["grub rescue prompt after update", "partitioning the new disk", "wifi drops"]
    windows = [_make_window(i, "!a:example.org", b) for i, b in enumerate(bodies_)]
    index(store, windows, emb.encode(bodies_))
    building = TermIndex()  # as start_term_index leaves it until built
    monkeypatch.setattr(searcher, "SCAN_WINDOWS_MAX", 3)
    assert searcher._lexical_ranker(store, building).rank("grub", 10) == [windows[0].window_id]
    assert searcher._lexical_ranker(store, building).df("grub") == 1
    monkeypatch.setattr(searcher, "SCAN_WINDOWS_MAX", 2)
    waiting = searcher._lexical_ranker(store, building)
    assert waiting.rank("grub", 10) == [] and waiting.df("grub") == 0
    hits = searcher.Searcher(emb, store, terms=building).search(
        searcher.SourceQuery.build(["grub"])
    )
    assert all(h.window_id in {w.window_id for w in windows} for h in hits)
    building.build(
        [w.window_id for w in windows],
        lambda ids: iter(
            [(ids, [[b] for b in bodies_], [{"room_id": "!a:example.org", "corpus": "chat"}] * 3)]
        ),
    )
    assert searcher._lexical_ranker(store, building).rank("grub", 10) == [windows[0].window_id]
