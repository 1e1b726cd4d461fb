"""The lexical leg of search: BM25 over the message bodies of the stored windows.

Text is cut into keys and query terms by one tokenizer (tokens.py): words, compounds
(`max_bytes`, `nginx.conf`, `2.6.8`), character bigrams of Chinese, Japanese and Korean.
A term is answered from the keyword index in the event log (store/eventlog/keywords.py:
written with the text, in the same transactions, by the same tokenizer); while an event
log from before it is still being indexed, the leg scans the event log's bodies with
the same tokenizer (lexical.matching). Either way the leg sees the windows the event
log holds as indexed (a redacted word stops matching with the redaction). Per query text:

    terms     tokens.tokens: words and compounds whole, bigrams, stop words dropped; an
              alphabetic word of 5 or more letters loses a plural or verb ending and
              matches as a word prefix ("partitions" finds "partition", "partitioning")
    df, N     windows matching a term (ids only), windows in the collection
    prefilter sum of idf(t) over matching terms ranks every candidate; the best
              PREFILTER are scored with full BM25 (k1 = 1.2, b = 0.75, term frequency
              and length in words of the bodies), which gives the leg's order.

Only bodies are matched, never sender ids or times.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..records import CORPUS_CHAT, CORPUS_REFERENCE
from .tokens import (
    STOP_WORDS,
    base_of,
    borrowed,
    doc_keys,
    keys,
    matchable,
    matches,
    normalise,
    stem,
    tokens,
)

if TYPE_CHECKING:
    from ..store.eventlog.keyword_reads import KeywordIndex
    from ..store.vectors.chroma import ChromaStore

__all__ = [
    "STOP_WORDS",
    "LexicalRanker",
    "base_of",
    "is_keywords",
    "matching",
    "stem",
    "terms",
    "words",
]

K1 = 1.2
B = 0.75
MAX_TERMS = 16
# Search-box words, not a sentence: a longer text is searched by meaning only. Measured
# on the Ubuntu IRC dev set (docs/benchmarks.md): matching the words of a paraphrased
# question only added noise to its vector's ranking.
LEXICAL_MAX_TERMS = 5
PREFILTER = 200
# _bounded_reads: a word in this many windows or more may be sought among the windows
# that can still rank rather than read whole (a rarer word is read: its count may lag
# the newest windows); seeking a window costs about SEEK_COST rows read in order.
BOUNDED_FROM = 1_000
SEEK_COST = 4
_SLACK = 1e-9  # the bounds are sums in another order than the scores'


def terms(text: str) -> list[str]:
    """The words of a query text worth matching, normalised, in order, once each."""
    return words(text)[:MAX_TERMS]


def words(text: str) -> list[str]:
    """Every term of a text worth matching (stop words aside), in order, once each."""
    return tokens(text)


def is_keywords(text: str, max_terms: int = LEXICAL_MAX_TERMS) -> bool:
    """Whether a query text is a handful of search words (gets a lexical leg)."""
    return 0 < len(terms(text)) <= max_terms


_WORD = re.compile(r"[\w']+")


def is_sentence(text: str) -> bool:
    """Whether a query text is written as an English sentence ("how do I...", "why is
    the sky blue?"), not typed as search words ("phones and onboarding"): it holds two
    stop words of English, or one and asks ("vault?" holds none)."""
    norm = normalise(text)
    stops = sum(1 for w in _WORD.findall(norm) if w.isascii() and w in STOP_WORDS)
    return stops >= 2 or (stops == 1 and norm.rstrip().endswith("?"))


def lexical_text(text: str, max_terms: int = LEXICAL_MAX_TERMS) -> str | None:
    """What a query text is searched by word for word, if anything: a handful of search
    words as typed; of a sentence written mostly in another script than Latin, its
    Latin-script terms (tokens.borrowed: what a Chinese or Russian question shares with
    English chat, which the vector alone finds poorly across languages:
    docs/multilingual.md). A sentence otherwise is searched by meaning only."""
    if not max_terms:
        return None
    if is_keywords(text, max_terms):
        return text
    kept = borrowed(text)
    return " ".join(kept) if kept else None


def weighed_text(text: str, max_terms: int = LEXICAL_MAX_TERMS) -> str:
    """What a query text's word evidence (evidence.py) is weighed on: the text itself;
    of a sentence written mostly in another script than Latin, the terms it keeps in
    Latin script. A term no window holds weighs most ("sourdough starter" is not
    answered by "starter" alone), and one few windows hold weighs almost as much: a
    Chinese or Russian question's own words are held by no window of a room that
    speaks English, or by a few stray lines in its language, and would leave the
    technical terms it names there almost no weight (Gitter dev questions against the
    English chat, multilingual-e5-small, success@5: Chinese 0.508 -> 0.661, Russian
    0.646 -> 0.661; docs/multilingual.md). A question with no such term is weighed on
    its own words, as in a room written in its language."""
    return lexical_text(text, max_terms) or text


# (term base, prefix, where) -> ids of the windows whose bodies hold a matching key
Matcher = Callable[[str, bool, dict | None], list[str]]
# ids -> {id: the bodies it holds (Hit.bodies)}
Fetcher = Callable[[list[str]], Mapping[str, Sequence[str]]]


@dataclass
class LexicalRanker:
    """Asks the keyword index in the event log (store/eventlog/keyword_reads.py) once it is
    built, else scans the event log's text: the same windows either way, in the same
    order."""

    match: Matcher
    fetch: Fetcher
    total: Callable[[], int]
    index: KeywordIndex | None = None

    def rank(self, text: str, n: int, where: dict | None = None) -> list[str]:
        """Window ids best first by BM25 of the text's terms, at most n."""
        # One entry per stem: "partition partitions" must not count the word twice.
        words = list({stem(t): t for t in reversed(terms(text))}.values())[::-1]
        if not words:
            return []
        got = self._from_index(words, where) if self.index is not None else None
        return (got if got is not None else self._from_scan(words, where))[:n]

    def df(self, term: str, where: dict | None = None) -> int:
        """How many stored windows hold the term (from the postings, else a scan)."""
        if self.index is not None:
            got = self.index.df(*base_of(term), where=where)
            if got is not None:
                return got
        return len(self.match(*base_of(term), where))

    def _from_index(self, words: list[str], where: dict | None) -> list[str] | None:
        """_prefilter and _bm25 on the index's arrays: the same pool in the same order
        (ties by window id), without a Python loop over every matching window."""
        index = self.index
        assert index is not None
        total = max(index.count(), 1)
        if where is None:
            hits, idf = _bounded_reads(index, words, total)
        else:  # a room's windows: counting a word there reads its postings anyway
            hits = {}
            for t in words:
                got = index.postings(*base_of(t), where=where)
                if got is None:
                    return None  # a filter the index does not take: scan
                if len(got[0]):
                    hits[t] = got
            idf = {t: _idf(total, len(docs)) for t, (docs, _) in hits.items()}
        if not hits:
            return []
        # Every doc any term holds, once; coarse scores added in term order, as
        # _prefilter adds them (the same floats).
        cand, at = np.unique(np.concatenate([d for d, _ in hits.values()]), return_inverse=True)
        coarse = np.zeros(len(cand))
        start = 0
        for t, (docs, _) in hits.items():
            coarse[at[start : start + len(docs)]] += idf[t]
            start += len(docs)
        pool_docs, pool = _best(cand, coarse, index)
        if not pool:
            return []
        lengths = index.lengths(pool_docs)
        tfs = []
        for docs, tf in hits.values():
            i = np.searchsorted(docs, pool_docs)
            found = (i < len(docs)) & (docs[np.minimum(i, len(docs) - 1)] == pool_docs)
            tfs.append(np.where(found, tf[np.minimum(i, len(docs) - 1)], 0))
        return _bm25_arrays(pool, list(idf.values()), tfs, lengths)

    def _from_scan(self, words: list[str], where: dict | None) -> list[str]:
        hits: dict[str, dict[str, int]] = {}
        for t in words:
            ids = self.match(*base_of(t), where)
            if ids:
                hits[t] = dict.fromkeys(ids, 1)
        if not hits:
            return []
        idf, pool = _prefilter(hits, max(self.total(), 1))
        docs = self.fetch(pool)
        counts = {w: doc_keys(docs.get(w, ())) for w in pool}

        def tf(w: str, t: str) -> int:
            if w not in hits[t]:
                return 0
            base, prefix = base_of(t)
            return sum(c for k, c in counts[w][1].items() if matches(base, prefix, k)) or 1

        return _bm25(pool, idf, tf, lambda w: counts[w][0])


def _bounded_reads(
    index: KeywordIndex, words: list[str], total: int
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, float]]:
    """Each word's (docs, tfs) and idf, in the words' order, as _from_index scores them;
    a common word's postings only for the windows that can still reach the PREFILTER
    best. MaxScore (Turtle and Flood, 1995): the words are read rarest first, and once
    PREFILTER windows score more than every unread word's idf together, a window holding
    none of the words read cannot reach them. Each common word (BOUNDED_FROM windows or
    more) is then sought among the windows that still can (their score plus the unread
    words' idf reaching the PREFILTER-th score so far, a bound that rises word by word)
    instead of read whole: its tens of thousands of rows were most of a search-box
    query's time at a million windows (bench/scale.py). The PREFILTER best, their ties
    and their scores are those of reading every word whole; a word so sought is weighed
    by its counted df (keyword_reads: sampled at a million windows), the others by
    their postings."""
    df = {t: index.df(*base_of(t)) or 0 for t in words}
    read: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    idf: dict[str, float] = {}
    cand, score = np.zeros(0, dtype=np.int64), np.zeros(0)
    order = sorted(words, key=lambda t: df[t])
    bounded = False
    for i, t in enumerate(order):
        unread = sum(_idf(total, df[u]) for u in order[i:])
        if len(cand) >= PREFILTER and (bounded or df[t] >= BOUNDED_FROM):
            floor = np.partition(score, len(score) - PREFILTER)[len(score) - PREFILTER]
            bounded = bounded or floor > unread + _SLACK
        if bounded:
            able = score + unread >= floor - _SLACK
            cand, score = cand[able], score[able]
            idf[t] = _idf(total, df[t])
            got = (
                index.postings_among(*base_of(t), cand)
                if len(cand) * SEEK_COST < df[t]
                else _whole(index, t)
            )
            score[np.isin(cand, got[0], assume_unique=True)] += idf[t]
            read[t] = got
            continue
        got = _whole(index, t)
        if len(got[0]):
            read[t] = got
            idf[t] = _idf(total, len(got[0]))
            cand, at = np.unique(np.concatenate([cand, got[0]]), return_inverse=True)
            grown = np.zeros(len(cand))
            grown[at[: len(score)]] = score
            grown[at[len(score) :]] += idf[t]
            score = grown
    # A word none of the windows that can rank holds adds 0.0 to each: left out.
    kept = [t for t in words if t in read and len(read[t][0])]
    return {t: read[t] for t in kept}, {t: idf[t] for t in kept}


def _whole(index: KeywordIndex, word: str) -> tuple[np.ndarray, np.ndarray]:
    got = index.postings(*base_of(word))
    assert got is not None  # no filter: the index takes it
    return got


def _idf(total: int, df: int) -> float:
    return math.log(1 + (total - df + 0.5) / (df + 0.5))


def _best(
    cand: np.ndarray, coarse: np.ndarray, index: KeywordIndex
) -> tuple[np.ndarray, list[str]]:
    """The docs and ids of the PREFILTER best windows by coarse score, best first, ties
    by window id: what _prefilter's sort gives."""
    if len(cand) > PREFILTER:
        floor = np.partition(coarse, len(coarse) - PREFILTER)[len(coarse) - PREFILTER]
        above, tied = cand[coarse > floor], cand[coarse == floor]
        need = PREFILTER - len(above)
        # Ties at the floor (one word: every window with it) by window id, smallest
        # first, picked by the index (the ids of the others are never read).
        picked = [d for _, d in index.smallest(tied, need)] if need else []
        keep = np.concatenate([above, np.array(picked, dtype=np.int64)])
        coarse = coarse[np.searchsorted(cand, keep)]
        cand = keep
    ids, listed = index.ids_of(cand), coarse.tolist()
    order = sorted(range(len(cand)), key=lambda i: (-listed[i], ids[i]))
    return cand[np.array(order, dtype=np.int64)], [ids[i] for i in order]


def _prefilter(hits: dict[str, dict[str, int]], total: int) -> tuple[dict[str, float], list[str]]:
    """idf per term; the PREFILTER candidates best by their terms' summed idf."""
    total = max(total, 1)
    idf = {t: _idf(total, len(ids)) for t, ids in hits.items()}
    coarse: dict[str, float] = {}
    for t, ids in hits.items():
        for wid in ids:
            coarse[wid] = coarse.get(wid, 0.0) + idf[t]
    if len(coarse) > PREFILTER:  # only those reaching the PREFILTER-th score get sorted
        floor = heapq.nlargest(PREFILTER, coarse.values())[-1]
        coarse = {w: c for w, c in coarse.items() if c >= floor}
    return idf, sorted(coarse, key=lambda w: (-coarse[w], w))[:PREFILTER]


def _bm25_arrays(
    pool: list[str], idf: list[float], tfs: list[np.ndarray], lengths: np.ndarray
) -> list[str]:
    """_bm25 on arrays (one tf array per term, in idf's order, over the pool): the same
    floats, as each is reached by the same operations in the same order (a term a window
    lacks adds 0.0), so the same order; a third of the leg's time in Python (200 windows
    x terms at 100,000 windows)."""
    avg = int(lengths.sum()) / len(lengths) or 1.0
    norm = K1 * (1 - B + B * lengths / avg)
    scores = np.zeros(len(pool))
    for weight, f in zip(idf, tfs):
        f = f.astype(np.float64)
        scores += weight * f * (K1 + 1) / (f + norm)
    at: dict[str, float] = dict(zip(pool, scores.tolist()))
    return sorted(pool, key=lambda w: (-at[w], w))


def _bm25(
    pool: list[str],
    idf: dict[str, float],
    tf: Callable[[str, str], int],
    length: Callable[[str], int],
) -> list[str]:
    """The pool ordered by BM25 (lengths normalised by the pool's mean)."""
    lengths = {w: length(w) for w in pool}
    avg = sum(lengths.values()) / len(lengths) or 1.0
    scores = {}
    for w in pool:
        norm = K1 * (1 - B + B * lengths[w] / avg)
        s = 0.0
        for t, weight in idf.items():
            f = tf(w, t)
            if f:
                s += weight * f * (K1 + 1) / (f + norm)
        scores[w] = s
    return sorted(scores, key=lambda w: (-scores[w], w))


def matching(
    store: ChromaStore, base: str, prefix: bool = False, where: dict | None = None
) -> list[str]:
    """Ids of the stored windows one of whose bodies holds a key the term (its
    `base_of`) matches, scanning the store's event log with the tokenizer the postings
    use: the leg asks this only when its postings cannot answer. `where`: the room and
    corpus filters search uses."""
    eventlog = store.eventlog
    if eventlog is None:
        return []

    def holds(text: str) -> bool:
        return any(matches(base, prefix, k) for k in keys(text))

    room, corpus = _room_corpus(where)
    found: set[str] = set()
    if corpus in (None, CORPUS_CHAT):
        for one in room if isinstance(room, tuple) else (room,):  # a chain: each room
            found |= eventlog.texts.bodies_matching(holds, one, contains=base)
    if corpus in (None, CORPUS_REFERENCE) and room is None:
        found |= eventlog.texts.refs_matching(
            lambda text: any(holds(part) for part in matchable([text]))
        )
    if not found:
        return []
    # Only what the collection holds (the event log may be a step ahead).
    return sorted(store.records(include=(), ids=sorted(found))["ids"])


def _room_corpus(where: dict | None) -> tuple[str | tuple[str, ...] | None, str | None]:
    """The room (a chain's rooms: a tuple) and corpus of the `where` forms search uses
    (room_id, room_id $in, corpus, $and)."""
    clauses = (where or {}).get("$and", [where] if where else [])
    got: dict = {}
    for c in clauses:
        got.update(c)
    room = got.get("room_id")
    if isinstance(room, dict):
        room = tuple(room.get("$in") or ())
    return room, got.get("corpus")
