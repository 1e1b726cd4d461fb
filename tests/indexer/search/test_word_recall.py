"""A sentence's words recall windows into the pool the presenter ranks by their lines
(searcher.WORD_RECALL): a question cut into a window with other talk has a vector far
from the query though its own line is the question.

On a real event log and embedded Chroma with the hash embedder (bag of words: the
window of many unrelated lines is far from the query by its vector, its question line
close), the pool cut to one window so that only recall can bring the question in. The
figures on the dev sets are bench/quotes.py's (docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.search import searcher as searcher_module
from matrix_sources.indexer.search.present import Presenter
from matrix_sources.indexer.search.searcher import Searcher, SourceQuery

from .test_abstain import ALICE, BOB, OPS, T0, message, world

HOUR = 3_600_000
# More than five search words (lexical.LEXICAL_MAX_TERMS): a sentence, not search words.
QUESTION = "how do I rotate the synapse signing key before it expires next month"
# Other talk in the question's window: it pulls the window's vector off the question.
CHATTER = [
    "lunch was great today",
    "the coffee machine on floor three is broken again",
    "anyone watching the match tonight",
    "my cat knocked over the plant",
    "weekend plans include hiking near the lake",
    "remember to water the office ferns",
]


class EnglishHash(HashEmbedder):
    """The hash embedder as an English-only model that knows its words (the shipped
    model is one: language.english_texts)."""

    def words(self) -> frozenset[str]:
        return frozenset(
            "how do i rotate the synapse signing key before it expires next month who won "
            "chess championship final of in spring".split()
        )


def _room(tmp_path, embedder):
    log, store, ingest, pipeline = world(tmp_path, embedder)
    # A window whose lines each hold a word or two of the question: by its vector the
    # nearest, by its lines weak.
    scattered = ["synapse", "signing key", "rotate", "expires", "next month"]
    events = [message(OPS, f"$d{i}", BOB, T0 + i * 1000, b) for i, b in enumerate(scattered)]
    # Hours later, the question itself among other talk.
    t = T0 + 3 * HOUR
    events.append(message(OPS, "$q", ALICE, t, QUESTION))
    events += [message(OPS, f"$c{i}", BOB, t + (i + 1) * 1000, b) for i, b in enumerate(CHATTER)]
    # Windows holding a year, one with a second word of a question about chess.
    events.append(message(OPS, "$one", BOB, T0 + 6 * HOUR, "release 2026 is out"))
    events.append(message(OPS, "$two", BOB, T0 + 9 * HOUR, "the chess results of 2026 are in"))
    events.append(
        message(OPS, "$final", BOB, T0 + 12 * HOUR, "who won the championship final in spring")
    )
    ingest.admit(events)
    pipeline.process_all()
    return log, store


def _first(embedder, log, store, text: str = QUESTION) -> set[str]:
    s = Searcher(embedder, store, presenter=Presenter(log, embedder))
    hits = s.search(SourceQuery.build([text], top_k=1))
    return set(hits[0].event_ids) if hits else set()


def _pooled(embedder, log, store, text: str, monkeypatch) -> set[str]:
    """The events of the windows the presenter is given to rank (the pool)."""
    given: list[set[str]] = []
    present_above = Presenter.present_above

    def spy(self, hits, *args, **kwargs):
        given.append({e for h in hits for e in h.event_ids})
        return present_above(self, hits, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(Presenter, "present_above", spy)
        Searcher(embedder, store, presenter=Presenter(log, embedder)).search(
            SourceQuery.build([text], top_k=1)
        )
    return given[-1]


@pytest.fixture
def pool_of_one(monkeypatch):
    monkeypatch.setattr(searcher_module, "RERANK_POOL", 1)


def test_a_question_diluted_in_its_window_is_recalled_by_its_words(tmp_path, pool_of_one):
    embedder = EnglishHash()
    log, store = _room(tmp_path, embedder)
    # Its window is not the nearest by vector: the pool of one holds the other.
    nearest = store.nearest(embedder.encode([QUESTION]), 1)[0][0].window_id
    assert "$q" not in {m.event_id for m in log.texts.window_messages(nearest)}
    assert "$q" in _first(embedder, log, store)
    log.close()


def test_without_recall_the_pool_misses_it(tmp_path, pool_of_one, monkeypatch):
    monkeypatch.setattr(searcher_module, "WORD_RECALL", 0)
    embedder = EnglishHash()
    log, store = _room(tmp_path, embedder)
    assert "$q" not in _first(embedder, log, store)
    log.close()


def test_a_model_that_cannot_tell_the_language_recalls_nothing(tmp_path, pool_of_one):
    """The pair and other models without an English vocabulary: a question in another
    language would recall windows by stray tokens (a year, "de" in a URL)."""
    embedder = HashEmbedder()
    log, store = _room(tmp_path, embedder)
    assert "$q" not in _first(embedder, log, store)
    log.close()


def test_a_question_in_another_language_recalls_nothing(tmp_path, pool_of_one, monkeypatch):
    embedder = EnglishHash()
    log, store = _room(tmp_path, embedder)
    # Most of its words are not the model's: it does not read as English. It shares
    # "synapse signing key" with the question's window, which stays out of the pool.
    german = "wie rotiere ich den synapse signing key bevor er nächsten monat abläuft"
    assert "$q" not in _pooled(embedder, log, store, german, monkeypatch)
    assert "$q" in _pooled(embedder, log, store, QUESTION, monkeypatch)
    log.close()


def test_one_shared_word_of_a_sentence_recalls_nothing(tmp_path, pool_of_one, monkeypatch):
    """A window holding an exact token of the question ("2026") is never refused
    (abstain.py), so a window recall brings in must hold two of the sentence's words:
    "release 2026 is out" is not brought in, "the chess results of 2026" is."""
    embedder = EnglishHash()
    log, store = _room(tmp_path, embedder)
    question = "who won the chess championship final of 2026 in spring"
    # Nearest by its vector, it is the pool of one; the rest comes by recall only.
    nearest = store.nearest(embedder.encode([question]), 1, None, records=True)[0][0]
    assert set(nearest.window.event_ids if nearest.window else ()) == {"$final"}
    given = _pooled(embedder, log, store, question, monkeypatch)
    assert "$two" in given and "$one" not in given
    log.close()
