"""Search: a validated multi-text query, one vector per text, fused by reciprocal rank.

    score(window) = sum over ranked lists l where it appears of 1 / (k + rank_l)  (k = 60)

(Cormack, Clarke and Buettcher, SIGIR 2009.) Each text gives one list from its vector;
a text of a few search words (at most LEXICAL_MAX_TERMS besides stop words) gives a
second, lexical one: BM25 over the stored documents, asked of the same collection
(indexer/search/lexical.py). One sentence-long text gives exactly the single-vector order.
`Hit.ranks` keeps, per text, the rank and similarity from its vector only.

A hit scoring below the floor is dropped, whichever leg found it (abstain.py:
`search.min_similarity`, more for a hit sharing no word with the question): with the
presenter, on the score it ranks by (half the window's cosine similarity to the nearest
query text, half its closest line's); without, on the window's. An off-topic question
gets no hits ("nothing matches") rather than the least bad windows. Then the presenter
(present.py) gives each hit the answers it carries and the lines to quote.
`!sources` and `matrix-sources search` share this path.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..pipeline.embedder import Embedder
from ..records import CORPUS_CHAT, CORPUS_REFERENCE, Hit, RoomID
from ..store.chroma import ChromaStore
from .abstain import NO_FLOOR, Floor
from .evidence import NO_EVIDENCE, Evidence
from .legible import legible
from .lexical import LEXICAL_MAX_TERMS, LexicalRanker, is_keywords, matching
from .present import Presenter
from .termindex import TermIndex

MAX_TEXTS = 8
MAX_TEXT_BYTES = 1000
MAX_TOP_K = 20
DEFAULT_TOP_K = 5
DEFAULT_RRF_K = 60
RERANK_POOL = 20  # windows the presenter ranks again (docs/benchmarks.md)
CORPORA = (CORPUS_CHAT, CORPUS_REFERENCE)
_WORDY = re.compile(r"\w", re.UNICODE)


class QueryError(ValueError):
    """A query the user must fix; `field` names what is wrong (texts, texts[3], top_k)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class SourceQuery:
    texts: tuple[str, ...]
    top_k: int = DEFAULT_TOP_K
    room_id: RoomID | None = None
    corpus: str | None = None  # None: both

    @classmethod
    def build(cls, texts: object, top_k: object = DEFAULT_TOP_K, room_id: object = None,
              corpus: object = None) -> "SourceQuery":
        if not isinstance(texts, (list, tuple)):
            raise QueryError("texts", "must be a list of 1 to 8 strings")
        if not texts:
            raise QueryError("texts", "give at least one text")
        if len(texts) > MAX_TEXTS:
            raise QueryError("texts", f"{len(texts)} texts given, at most {MAX_TEXTS} allowed")
        clean = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise QueryError(f"texts[{i}]", "must be a string")
            if not t.strip():
                raise QueryError(f"texts[{i}]", "is empty")
            size = len(t.encode("utf-8", "surrogatepass"))
            if size > MAX_TEXT_BYTES:
                raise QueryError(f"texts[{i}]",
                                 f"is {size} bytes, at most {MAX_TEXT_BYTES} allowed")
            clean.append(t.strip())
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise QueryError("top_k", f"must be a whole number from 1 to {MAX_TOP_K}")
        if room_id is not None and (not isinstance(room_id, str) or not room_id.startswith("!")):
            raise QueryError("room", "must be a room id starting with '!'")
        if corpus is not None and corpus not in CORPORA:
            raise QueryError("corpus", f"must be one of {', '.join(CORPORA)}")
        return cls(tuple(clean), top_k, RoomID(room_id) if room_id else None, corpus)


def rrf(lists: Sequence[Sequence[str]], k: int = DEFAULT_RRF_K) -> list[tuple[str, float]]:
    """Fuse ranked id lists. Ties broken by id so the result never depends on the
    order of the input lists. An id repeated inside one list counts once, at its best rank."""
    parts: dict[str, list[float]] = {}
    for ids in lists:
        seen: set[str] = set()
        for rank, wid in enumerate(ids, start=1):
            if wid in seen:
                continue
            seen.add(wid)
            parts.setdefault(wid, []).append(1.0 / (k + rank))
    # fsum is exactly rounded, so equal sums reached in any order are equal floats and
    # tie (then by id); a plain running sum differs in the last bit with the list order.
    scores = {wid: math.fsum(p) for wid, p in parts.items()}
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


@dataclass
class Searcher:
    embedder: Embedder
    store: ChromaStore
    rrf_k: int = DEFAULT_RRF_K
    # A text of at most this many words (stop words aside) is searched by its words
    # too: a BM25 leg fused beside its vector (indexer/search/lexical.py). 0: never.
    lexical_max_terms: int = LEXICAL_MAX_TERMS
    # The abstain floor (config search.min_similarity and no_shared_word_margin);
    # None: every hit is kept.
    floor: Floor | None = None
    presenter: Presenter | None = None

    def search(self, query: SourceQuery) -> list[Hit]:
        return self.search_with_closest(query)[0]

    def search_with_closest(self, query: SourceQuery) -> tuple[list[Hit], Hit | None]:
        """The hits, and when the floor left none, the closest one below it (what
        `!sources why 1` explains after a "nothing matches")."""
        # A duplicated text must not count twice: query each distinct text once.
        texts = list(dict.fromkeys(query.texts))
        if not any(_WORDY.search(t) for t in texts):
            return [], None  # "?", "!!!", emoji only: nothing to look for
        evidence = self._evidence(texts)
        # A script the model only spells out (indexer/search/legible.py): its vector says
        # nothing, so only windows holding the query's words may answer.
        words_only = not legible(texts, getattr(self.embedder, "tokenize", None))
        if words_only and not evidence.held_anywhere:
            return [], None
        # The presenter ranks a pool again by the windows' matched questions.
        depth = max(query.top_k, RERANK_POOL) if self.presenter is not None else query.top_k
        # Ask for more than depth per list so fusion can promote agreement.
        fusing = len(texts) > 1 or any(is_keywords(t, self.lexical_max_terms) for t in texts)
        n = max(depth * 4, 20) if fusing else depth
        vectors = self.embedder.encode(texts)
        scored = self._with_similarity(*self._retrieve(query, texts, vectors, depth, n),
                                       vectors)
        floor = (self.floor or Floor(NO_FLOOR)).for_query(texts, evidence, words_only) \
            if self.floor is not None or words_only else None
        if self.presenter is not None:  # the floor compares what the presenter ranks by
            return self.presenter.present_above(scored, vectors, query.top_k, floor,
                                                evidence)
        hits = [h for h in scored if floor is None
                or (h.similarity is not None and h.similarity >= floor.needed(h.text))]
        closest = None if hits or not scored else max(
            scored, key=lambda h: h.similarity if h.similarity is not None else -2.0)
        return hits[:query.top_k], closest

    def _evidence(self, texts: list[str]) -> Evidence:
        """The query's terms weighed by rarity (evidence.py); none without a keyword leg."""
        if not self.lexical_max_terms:
            return NO_EVIDENCE
        ranker = _lexical_ranker(self.store)
        return Evidence.of(texts, ranker.df, ranker.total(),
                           any(is_keywords(t, self.lexical_max_terms) for t in texts))

    @staticmethod
    def _with_similarity(hits: list[Hit], found: dict[str, list[float]],
                         vectors: list) -> list[Hit]:
        """Each hit with its best cosine similarity to any text: from its ranks, or for
        a hit only the keyword leg found, from its vector (`found`)."""
        queries = np.asarray(vectors, dtype=np.float64)
        out = []
        for h in hits:
            sims = [r[1] for r in h.ranks if r is not None]
            if h.window_id in found:
                sims += (queries @ np.asarray(found[h.window_id], dtype=np.float64)).tolist()
            out.append(replace(h, similarity=max(sims) if sims else None))
        return out

    def _lexical_lists(self, texts: list[str], n: int, where: dict | None) -> list[list[str]]:
        """The keyword leg's ranked ids, one list per text of a few search words."""
        ranker = _lexical_ranker(self.store)
        return [ids for ids in (ranker.rank(t, n, where) for t in texts
                                if is_keywords(t, self.lexical_max_terms)) if ids]

    def _retrieve(self, query: SourceQuery, texts: list[str], vectors: list, depth: int,
                  n: int) -> tuple[list[Hit], dict[str, list[float]]]:
        """The first `depth` windows of the fused ranking (n per vector, and the
        keyword leg's lists), and the vectors of those only the keyword leg found. (Run
        beside the encode in a thread, the leg made searches slower: both want the GIL
        between the model's native calls.)"""
        where = _where(query)
        if n == depth:  # one text, not fused: its list is the hits, records and all
            neighbours = self.store.nearest(vectors, n, where, records=True)
            per_text = [[(nb.window_id, nb.similarity) for nb in lst] for lst in neighbours]
            fused = [(wid, 1.0 / (self.rrf_k + r))
                     for r, (wid, _) in enumerate(per_text[0], start=1)]
            records = [nb.window for nb in neighbours[0] if nb.window is not None]
            found: dict[str, list[float]] = {}
        else:
            # Fused, each list is longer than what is kept: ids and similarities first,
            # then the records of the fused few in one call (Chroma's metadata for 20
            # results a list cost 1.3 ms of a 4 ms search at 100,000 windows, and a
            # keyword hit the vectors missed a second call, 0.9 ms; bench/query.py).
            per_text = [[(nb.window_id, nb.similarity) for nb in lst]
                        for lst in self.store.nearest(vectors, n, where)]
            lists = [[wid for wid, _ in lst] for lst in per_text]
            if self.lexical_max_terms:
                lists += self._lexical_lists(texts, n, where)
            if len(lists) == 1:
                fused = [(wid, 1.0 / (self.rrf_k + r))
                         for r, wid in enumerate(lists[0], start=1)]
            else:
                fused = rrf(lists, self.rrf_k)
            # The keyword leg's best stay in the pool whatever the vectors think: a
            # window holding a pasted token is what its searcher wants (evidence.py).
            keep = {wid for lst in lists[len(per_text):] for wid in lst[:depth]}
            fused = fused[:depth] + [f for f in fused[depth:] if f[0] in keep]
            dense = {wid for lst in per_text for wid, _ in lst}
            fetched = self.store.get_with_vectors([wid for wid, _ in fused])
            records = [w for w, _ in fetched]
            # Their vectors give the keyword leg's finds a similarity.
            found = {w.window_id: v for w, v in fetched if w.window_id not in dense}
        # Texts are read for the windows kept only (0.6 ms of a 4 ms search).
        by_id = {w.window_id: w for w in self.store.with_texts(records)}
        # Per text: its dense rank and cosine similarity (None when it did not find it).
        ranks = [{wid: (r, sim) for r, (wid, sim) in enumerate(lst, 1)} for lst in per_text]
        hits = []
        for wid, score in fused:
            w = by_id.get(wid)
            if w is None:  # deleted between the two legs' reads
                continue
            hits.append(Hit(w.window_id, w.room_id, w.room_label, w.corpus, w.event_ids,
                            w.senders, w.ts_first, w.ts_last, score, w.text,
                            tuple(r.get(wid) for r in ranks), ref=w.ref, lines=w.lines))
        return hits, found


def _lexical_ranker(store: ChromaStore) -> LexicalRanker:
    def fetch(ids: list[str]) -> dict[str, str]:
        return {w.window_id: w.text for w in store.get(ids)} if ids else {}

    # The store's postings once built (the service's own store; termindex.py).
    terms = store.terms if isinstance(store.terms, TermIndex) and store.terms.ready.is_set() \
        else None
    return LexicalRanker(lambda base, prefix, where: matching(store, base, prefix, where), fetch,
                         store.count, terms)


def _where(query: SourceQuery) -> dict | None:
    clauses = []
    if query.room_id:
        clauses.append({"room_id": query.room_id})
    if query.corpus:
        clauses.append({"corpus": query.corpus})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}
