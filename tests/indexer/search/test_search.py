"""Search: query validation naming the field, reciprocal rank fusion, and the Searcher
over a real (embedded) Chroma with the fast hash embedder."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.pipeline.chunker import build_windows, embed_text
from matrix_sources.indexer.records import ChunkPolicy, EventID, Message, RoomID, UserID, Window
from matrix_sources.indexer.search.lexical import LEXICAL_MAX_TERMS, is_keywords, stem, terms
from matrix_sources.indexer.search.searcher import (
    DEFAULT_RRF_K,
    MAX_TEXT_BYTES,
    MAX_TEXTS,
    MAX_TOP_K,
    QueryError,
    Searcher,
    SourceQuery,
    rrf,
)
from matrix_sources.indexer.search.texts import WindowTexts
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.storekit import edit, index, open_store
from tests.strength import examples

# -- SourceQuery.build ------------------------------------------------------------------


def refusal(*args, **kwargs) -> QueryError:
    with pytest.raises(QueryError) as info:
        SourceQuery.build(*args, **kwargs)
    return info.value


def test_valid_query():
    q = SourceQuery.build(["  rotate the key  ", "signing key"], 3, "!r:x", "chat")
    assert q.texts == ("rotate the key", "signing key")
    assert (q.top_k, q.room_id, q.corpus) == (3, "!r:x", "chat")


def test_eight_texts_are_fine_nine_are_not():
    assert len(SourceQuery.build(["t"] * MAX_TEXTS).texts) == MAX_TEXTS
    e = refusal(["t"] * (MAX_TEXTS + 1))
    assert e.field == "texts"
    assert "9" in str(e) and "8" in str(e)


@pytest.mark.parametrize("texts", [[], (), "a string", None, 5])
def test_texts_must_be_a_non_empty_list(texts):
    assert refusal(texts).field == "texts"


@pytest.mark.parametrize("texts,index", [([""], 0), (["ok", ""], 1), (["ok", "fine", "  \n "], 2)])
def test_empty_text_is_refused_by_index(texts, index):
    e = refusal(texts)
    assert e.field == f"texts[{index}]"
    assert "empty" in e.message


def test_non_string_text_is_refused_by_index():
    assert refusal(["ok", 5]).field == "texts[1]"


def test_text_over_the_byte_limit_is_refused_with_its_size():
    assert SourceQuery.build(["a" * MAX_TEXT_BYTES]).texts == ("a" * MAX_TEXT_BYTES,)
    e = refusal(["fine", "a" * (MAX_TEXT_BYTES + 1)])
    assert e.field == "texts[1]"
    assert str(MAX_TEXT_BYTES + 1) in e.message
    # Bytes, not characters: 501 two-byte characters are 1002 bytes.
    e = refusal(["é" * 501])
    assert e.field == "texts[0]" and "1002" in e.message


@pytest.mark.parametrize("top_k", [0, MAX_TOP_K + 1, -1, True, False, 2.0, "3", None])
def test_bad_top_k(top_k):
    e = refusal(["text"], top_k)
    assert e.field == "top_k"


@pytest.mark.parametrize("top_k", [1, MAX_TOP_K])
def test_top_k_bounds_are_inclusive(top_k):
    assert SourceQuery.build(["text"], top_k).top_k == top_k


def test_bad_room_and_corpus_name_their_field():
    assert refusal(["t"], room_id="#alias:x").field == "room"
    assert refusal(["t"], corpus="everything").field == "corpus"


# -- rrf ---------------------------------------------------------------------------------

ids = st.sampled_from([f"w{i}" for i in range(12)])
id_lists = st.lists(st.lists(ids, max_size=12), min_size=0, max_size=6)
RRF_SETTINGS = settings(max_examples=examples(300), deadline=None, database=None)


@RRF_SETTINGS
@given(id_lists, st.integers(1, 100))
def test_rrf_is_deterministic(lists, k):
    """The same lists fuse to the same ranking, and that ranking is RRF's: each id scored
    1/(k+rank) at its best rank in each list, summed, highest first, ties by id."""
    fused = rrf(lists, k)
    assert fused == rrf([list(x) for x in lists], k)
    parts: dict[str, list[float]] = {}
    for ids in lists:
        for wid in dict.fromkeys(ids):
            parts.setdefault(wid, []).append(1.0 / (k + list(ids).index(wid) + 1))
    assert fused == sorted(
        ((w, math.fsum(p)) for w, p in parts.items()), key=lambda kv: (-kv[1], kv[0])
    )


@RRF_SETTINGS
@given(id_lists, st.randoms(use_true_random=False))
def test_rrf_does_not_depend_on_the_order_of_the_lists(lists, rnd):
    shuffled = list(lists)
    rnd.shuffle(shuffled)
    assert rrf(shuffled) == rrf(lists)


def test_equal_scores_tie_by_id_whatever_the_list_order():
    # "a" has ranks 1, 1, 2 and "d" 2, 1, 1: equal scores, so "a" (smaller id) first,
    # for every order of the lists (a running float sum differs in the last bit).
    lists = [["a", "b"], ["a", "d"], ["d", "a"], ["d", "b"]]
    results = {tuple(rrf(list(p))) for p in itertools.permutations(lists)}
    assert len(results) == 1
    assert [w for w, _ in results.pop()] == ["a", "d", "b"]


@RRF_SETTINGS
@given(id_lists)
def test_rrf_returns_only_ids_from_the_lists_once_each(lists):
    fused = rrf(lists)
    out = [wid for wid, _ in fused]
    assert len(out) == len(set(out))
    assert set(out) == {wid for lst in lists for wid in lst}


@RRF_SETTINGS
@given(id_lists)
def test_rrf_scores_are_descending(lists):
    scores = [s for _, s in rrf(lists)]
    assert scores == sorted(scores, reverse=True)


def test_agreement_outranks_a_single_first_place():
    fused = rrf([["solo", "both"], ["both", "x"], ["y", "z"]])
    assert [w for w, _ in fused][:1] == ["both"]
    fused = rrf([["both", "a"], ["both", "b"], ["solo", "c"]])
    assert fused[0][0] == "both"
    assert fused[0][1] == pytest.approx(2 / (DEFAULT_RRF_K + 1))
    assert dict(fused)["solo"] == pytest.approx(1 / (DEFAULT_RRF_K + 1))


def test_id_repeated_inside_one_list_counts_once():
    fused = dict(rrf([["a", "a", "b"]]))
    assert fused["a"] == pytest.approx(1 / (DEFAULT_RRF_K + 1))
    assert fused["b"] == pytest.approx(1 / (DEFAULT_RRF_K + 3))


# -- Searcher over real Chroma -------------------------------------------------------------

ROOM = RoomID("!ops:example.org")
OTHER = RoomID("!chat:example.org")
TOPICS = [
    "rotate the signing key before it expires",
    "the signing key expired and federation broke",
    "backup the postgres database every night",
    "restore the database from last night's backup",
    "upgrade synapse to the new release",
    "the release notes mention a new config option",
    "lunch plans for friday",
    "the matrix bridge to discord keeps disconnecting",
    "key rotation guide in the docs",
    "federation is slow for large rooms",
]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    store = open_store(tmp_path_factory.mktemp("search"))
    emb = HashEmbedder()
    messages = [
        Message(
            EventID(f"$m{i}"),
            ROOM if i % 3 else OTHER,
            UserID("@a:example.org"),
            1_700_000_000_000 + i * 3_600_000 * 2,
            text,
        )
        for i, text in enumerate(TOPICS)
    ]
    windows = []
    for room in (ROOM, OTHER):
        windows += build_windows(
            [m for m in messages if m.room_id == room], ChunkPolicy(max_bytes=10, gap_ms=1)
        )  # one message each
    index(store, windows, emb.encode([embed_text(w) for w in windows]))
    return store, emb


@pytest.mark.parametrize(
    "text", ["signing key", "database backup", "federation", "new release", "nothing in common zzz"]
)
@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_one_text_gives_exactly_the_single_vector_order(indexed, text, top_k):
    """Without the lexical leg (lexical_max_terms=0), as for any sentence-long text."""
    store, emb = indexed
    hits = Searcher(emb, store, lexical_max_terms=0).search(SourceQuery.build([text], top_k))
    [bare] = store.nearest(emb.encode([text]), top_k, records=True)
    assert [h.window_id for h in hits] == [nb.window_id for nb in bare]
    assert [h.ranks[0][0] for h in hits] == list(range(1, len(hits) + 1))
    assert [h.ranks[0][1] for h in hits] == pytest.approx([nb.similarity for nb in bare])
    assert [h.text for h in hits] == [
        text for text, _ in WindowTexts(store.eventlog).read([nb.window for nb in bare])
    ]


def test_duplicated_text_counts_once(indexed):
    store, emb = indexed
    s = Searcher(emb, store)
    alone = s.search(SourceQuery.build(["signing key"], 5))
    twice = s.search(SourceQuery.build(["signing key", "signing key"], 5))
    assert twice == alone
    # Also when the copies differ only in surrounding space.
    assert s.search(SourceQuery.build(["signing key", "  signing key "], 5)) == alone


def test_query_texts_are_embedded_in_one_batch(indexed):
    store, _ = indexed
    emb = HashEmbedder()
    Searcher(emb, store).search(SourceQuery.build(["signing key", "database", "release"], 5))
    assert emb.batches == 1 and emb.texts_seen == 3


def test_multi_text_fuses_both_topics(indexed):
    store, emb = indexed
    hits = Searcher(emb, store).search(
        SourceQuery.build(["signing key rotation", "postgres database backup"], 4)
    )
    texts = " ".join(h.text for h in hits)
    assert "signing key" in texts and "database" in texts
    assert len({h.window_id for h in hits}) == len(hits) <= 4
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_room_filter(indexed):
    store, emb = indexed
    hits = Searcher(emb, store).search(SourceQuery.build(["signing key"], 10, room_id=OTHER))
    assert hits and {h.room_id for h in hits} == {OTHER}


def test_empty_store_gives_no_hits(tmp_path):
    store = open_store(tmp_path / "empty")
    assert Searcher(HashEmbedder(), store).search(SourceQuery.build(["a", "b"])) == []


@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_a_sentence_gets_no_lexical_leg(indexed, top_k):
    store, emb = indexed
    text = "which backup of the postgres database restores last night's rooms fastest"
    assert not is_keywords(text)
    hits = Searcher(emb, store).search(SourceQuery.build([text], top_k))
    [bare] = store.nearest(emb.encode([text]), top_k)
    assert [h.window_id for h in hits] == [nb.window_id for nb in bare]


# -- the lexical leg ------------------------------------------------------------------------


def test_terms_drop_stop_words_and_stem_endings():
    assert terms("How do I rotate the Signing keys?") == ["rotate", "signing", "keys"]
    assert [stem(t) for t in ("partitions", "spinning", "stopped", "rar", "ext3")] == [
        "partition",
        "spin",
        "stop",
        "rar",
        "ext3",
    ]
    assert is_keywords("rar archive") and not is_keywords("the a of")
    assert not is_keywords(" ".join(f"word{i}" for i in range(LEXICAL_MAX_TERMS + 1)))


@pytest.fixture
def chat(tmp_path):
    """Windows whose words the hash embedder cannot connect to the queries below:
    only the lexical leg finds them by their stems."""
    store = open_store(tmp_path)
    emb = HashEmbedder()
    lines = [
        ("$p1", ROOM, "@alice:example.org", "resized both partitions with gparted"),
        ("$p2", ROOM, "@bob:example.org", "lunch at noon?"),
        ("$p3", OTHER, "@carol:example.org", "my partitioning failed halfway"),
        ("$p4", ROOM, "@gparted:example.org", "nothing to see here"),
    ]
    messages = [
        Message(EventID(e), r, UserID(u), 1_700_000_000_000 + i * 7_200_000, body)
        for i, (e, r, u, body) in enumerate(lines)
    ]
    windows = [
        w
        for room in (ROOM, OTHER)
        for w in build_windows(
            [m for m in messages if m.room_id == room], ChunkPolicy(max_bytes=10, gap_ms=1)
        )
    ]
    index(store, windows, emb.encode([embed_text(w) for w in windows]))
    return store, emb, {w.event_ids[0]: w for w in windows}


def dense_only(hit) -> float:
    """The fused score a hit would have from its one text's vector alone."""
    return 1 / (DEFAULT_RRF_K + hit.ranks[0][0]) if hit.ranks[0] else 0.0


def test_keywords_find_a_window_by_its_words(chat):
    store, emb, _ = chat
    hits = Searcher(emb, store).search(SourceQuery.build(["partition"], 4))
    assert {h.first_event_id for h in hits[:2]} == {"$p1", "$p3"}
    for h in hits:  # the two carry a lexical rank on top of their dense one
        assert (h.score > dense_only(h)) == (h.first_event_id in ("$p1", "$p3"))
    # The room filter holds for the lexical leg too.
    hits = Searcher(emb, store).search(SourceQuery.build(["partition"], 5, room_id=OTHER))
    assert [h.first_event_id for h in hits] == ["$p3"]


def test_the_lexical_leg_reads_bodies_not_senders(chat):
    store, emb, _ = chat
    hits = {
        h.first_event_id: h for h in Searcher(emb, store).search(SourceQuery.build(["gparted"], 4))
    }
    assert hits["$p1"].score > dense_only(hits["$p1"])
    assert hits["$p4"].score == pytest.approx(dense_only(hits["$p4"]))  # only its sender


def test_the_lexical_leg_sees_what_the_store_holds_now(chat):
    """A window re-upserted without a word (a redaction, an edit) stops matching it."""
    store, emb, by_event = chat
    w = by_event["$p1"]
    edited = Window(
        w.window_id, w.room_id, (replace(w.messages[0], body="resized it"),), w.room_label
    )
    edit(store, edited, emb.encode([embed_text(edited)]))
    hits = {
        h.first_event_id: h
        for h in Searcher(emb, store).search(SourceQuery.build(["partition"], 4))
    }
    assert hits["$p3"].score > dense_only(hits["$p3"])
    assert hits["$p1"].score == pytest.approx(dense_only(hits["$p1"]))


# -- what the model cannot read (indexer/search/legible.py) ------------------------------------


@pytest.mark.parametrize(
    "pieces,spelled",
    [
        (["how", "do", "i", "mount", "n", "##fs", "?"], False),
        (["م", "##ا", "ه", "##ي", "ا", "##ف", "##ض", "##ل"], True),
        (["c", "+", "+"], False),  # too short to judge: the floor decides
        (["к", "##а", "##к", "с", "##м", "##о", "##н", "##т"], True),
        (["ext", "##3", "mount", "fails", "on", "boot"], False),
    ],
)
def test_a_text_the_model_only_spells_out_is_not_read(pieces, spelled):
    from matrix_sources.indexer.search.legible import spelled_out

    assert spelled_out(pieces) is spelled


def test_an_illegible_query_gets_nothing_and_a_legible_one_is_searched(tmp_path):
    from matrix_sources.indexer.search.legible import legible

    store = ChromaStore(path=tmp_path / "chroma")
    emb = HashEmbedder()
    emb.tokenize = lambda t: list(t.replace(" ", ""))  # every letter a piece: spelled
    s = Searcher(emb, store)
    assert s.search_with_closest(SourceQuery.build(["ما هي أفضل طريقة"])) == ([], None)
    assert emb.texts_seen == 0  # refused before any embedding
    assert legible(["how do I mount it"], lambda t: t.split())
