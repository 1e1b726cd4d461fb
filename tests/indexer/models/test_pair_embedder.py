"""Two models in one vector (indexer/models/pair_embedder.py): the similarity is each
model's cosine from its own floor, weighed by how much of the question is English; the
store reports it for a query that is not a unit vector; and with the real models, an
English one-command answer the multilingual model alone misses comes first."""

from __future__ import annotations

import math

import numpy as np
import pytest

from matrix_sources.indexer.models.embedder import HashEmbedder, load_embedder, query_side
from matrix_sources.indexer.models.pair_embedder import (
    ENGLISH_WEIGHT,
    SHARE_FROM,
    SHARE_FULL,
    PairEmbedder,
)
from matrix_sources.indexer.pipeline.chunker import window_id
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

F_EN, F_MUL = 0.34, 0.85
VOCAB = frozenset("how do i see which directory am in the you can type to print a working".split())


class Multilingual(HashEmbedder):
    """A second fake with a query side of its own, like E5."""

    name = "fake-multilingual"

    def __init__(self) -> None:
        super().__init__(dim=48)
        self.queries = 0

    def encode_queries(self, texts):
        self.queries += 1
        return self.encode(texts)


def pair() -> PairEmbedder:
    return PairEmbedder(HashEmbedder(dim=32), Multilingual(), (F_EN, F_MUL), VOCAB)


def test_the_share_follows_the_words_the_english_model_knows():
    p = pair()
    assert p.english_share("how do i see which directory i am in") == ENGLISH_WEIGHT
    assert p.english_share("как узнать текущий каталог") == 0.0
    assert p.english_share("1234 !!!") == 0.0  # no letter-word: the multilingual model alone
    # Between the two shares, linear: 3 of 4 words known.
    known = 0.75
    want = ENGLISH_WEIGHT * (known - SHARE_FROM) / (SHARE_FULL - SHARE_FROM)
    assert p.english_share("how do i zwiebelkuchen") == pytest.approx(want)


def test_a_window_is_one_unit_vector_holding_both_models():
    p = pair()
    texts = ["you can type pwd", "la receta del pan"]
    w = np.asarray(p.encode(texts))
    assert w.shape == (2, 32 + 48 + 1) and p.dim == 81
    assert np.allclose(np.linalg.norm(w, axis=1), 1.0)
    en, mul = np.asarray(p.english.encode(texts)), np.asarray(p.multilingual.encode(texts))
    assert np.allclose(w[:, :32] * math.sqrt(3), en) and np.allclose(
        w[:, 32:80] * math.sqrt(3), mul
    )
    assert np.allclose(np.asarray(p.encode_each(texts)), w)
    assert p.encode([]) == [] and p.encode_queries([]) == []


@pytest.mark.parametrize(
    "question",
    [
        "how do i see which directory i am in",
        "как узнать текущий каталог",
        "how do i see das verzeichnis",
    ],
)
def test_the_similarity_is_each_models_cosine_from_its_own_floor(question):
    p = pair()
    windows = ["you can type pwd to print the working directory", "как узнать каталог: pwd"]
    w = np.asarray(p.encode(windows))
    q = np.asarray(query_side(p).encode([question])[0])
    assert p.multilingual.queries == 1  # the multilingual model's query side was asked
    a = p.english_share(question)
    cos_en = np.asarray(p.english.encode(windows)) @ np.asarray(p.english.encode([question])[0])
    cos_mul = np.asarray(p.multilingual.encode(windows)) @ np.asarray(
        p.multilingual.encode([question])[0]
    )
    want = a * (cos_en - F_EN) + (1 - a) * (cos_mul - F_MUL) + F_MUL
    assert np.allclose(w @ q, want)
    if a == 0:  # a question the English model cannot read: the multilingual cosine itself
        assert np.allclose(w @ q, cos_mul)


@pytest.mark.parametrize(
    "question", ["how do i see which directory i am in", "как узнать текущий каталог"]
)
def test_a_line_as_the_question_is_weighed_as_a_query_would_be(question):
    """The presenter compares a response with the matched question's line: that line's
    vector turned into a query's (no model call) gives each model's cosine from its
    floor, by the line's English share, as a query of that text would."""
    from matrix_sources.indexer.search.present import Presenter

    p = pair()
    lines = ["you can type pwd to print the working directory", "как узнать каталог: pwd"]
    w = np.asarray(p.encode(lines))
    [asked] = p.encode([question])
    calls = p.english.batches, p.multilingual.batches
    q = np.asarray(p.passage_as_query(asked, question))
    assert (p.english.batches, p.multilingual.batches) == calls
    a = p.english_share(question)
    cos_en = np.asarray(p.english.encode(lines)) @ np.asarray(p.english.encode([question])[0])
    cos_mul = np.asarray(p.multilingual.encode(lines)) @ np.asarray(
        p.multilingual.encode([question])[0]
    )
    assert np.allclose(w @ q, a * (cos_en - F_EN) + (1 - a) * (cos_mul - F_MUL) + F_MUL)
    presenter = Presenter(eventlog=None, embedder=p)  # type: ignore[arg-type]
    assert np.allclose(presenter._as_question(np.asarray(asked), question), q)
    one = HashEmbedder()
    v = np.asarray(one.encode([question])[0])
    assert Presenter(eventlog=None, embedder=one)._as_question(v, question) is v  # type: ignore[arg-type]


def test_the_store_reports_the_dot_product_with_a_query_that_is_not_a_unit_vector(tmp_path):
    """Chroma's cosine space normalises the query; the store scales it back, so Chroma's
    similarity is the presenter's (w . q) and the floor reads one scale."""
    p = pair()
    room = RoomID("!pair:example.org")
    texts = [
        "you can type pwd to print the working directory",
        "la receta del pan",
        "which directory am i in",
        "el pan de platano",
    ]
    windows = []
    for i, t in enumerate(texts):
        m = Message(EventID(f"$p{i}"), room, UserID("@u:example.org"), 1_700_000_000_000 + i, t)
        windows.append(Window(window_id(room, m.event_id), room, (m,), "pair"))
    store = ChromaStore(path=tmp_path / "chroma")
    w = np.asarray(p.encode(texts), dtype=np.float32)
    store.upsert(windows, w)
    q = np.asarray(query_side(p).encode(["how do i see which directory i am in"]))
    assert abs(np.linalg.norm(q) - 1.0) > 0.1
    [found] = store.nearest(q, 4)
    by_id = {win.window_id: v for win, v in zip(windows, w)}
    assert [nb.similarity for nb in found] == pytest.approx(
        [float(by_id[nb.window_id] @ q[0]) for nb in found], abs=1e-5
    )
    assert [nb.similarity for nb in found] == sorted((nb.similarity for nb in found), reverse=True)


# -- the real models ---------------------------------------------------------------------

CHAT = [
    "anyone know a good irc client for gnome? try hexchat, it is in the repos",
    "how do I print the current folder path in a terminal? pwd",
    "my wifi drops every few minutes on 22.04, check dmesg for the driver",
    "is there a way to see which kernel I am running? uname -r",
]


@pytest.mark.slow
@pytest.mark.model
def test_the_real_pair_weighs_the_packaged_models_by_the_questions_english(model_exports):
    """Loaded as config names it: all-MiniLM-L6-v2 (onnx-int8, the shipped backend) and
    multilingual-e5-small (q4); an English question's similarity holds both models'
    cosines from their floors, a Russian one's is e5's own."""
    from matrix_sources.indexer.config import MODEL_FLOORS

    p = load_embedder("multilingual-e5-small+all-MiniLM-L6-v2", "q4", model_exports)
    assert (p.english.backend, p.multilingual.backend, p.dim) == ("onnx-int8", "q4", 769)
    assert (p.floor_en, p.floor_mul) == (
        MODEL_FLOORS["all-MiniLM-L6-v2"][0],
        MODEL_FLOORS["multilingual-e5-small"][0],
    )
    windows = np.asarray(p.encode(CHAT))
    cos_en = np.asarray(p.english.encode(CHAT))
    cos_mul = np.asarray(p.multilingual.encode(CHAT))
    for ask, share in [
        ("what command shows my kernel version", ENGLISH_WEIGHT),
        ("как посмотреть версию ядра", 0.0),
    ]:
        assert p.english_share(ask) == share
        sims = windows @ np.asarray(query_side(p).encode([ask])[0])
        en = cos_en @ np.asarray(p.english.encode([ask])[0])
        mul = cos_mul @ np.asarray(p.multilingual.encode_queries([ask])[0])
        want = share * (en - p.floor_en) + (1 - share) * (mul - p.floor_mul) + p.floor_mul
        assert np.allclose(sims, want, atol=1e-4)
        assert int(np.argmax(sims)) == 3, (ask, sims.round(3).tolist())
