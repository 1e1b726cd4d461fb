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
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import numpy as np

from ..models.embedder import Embedder
from ..models.ports import Tokenizer
from ..models.turns import ModelTurns
from ..records import Hit, Line, RoomID, bodies_of
from ..store.vectors.chroma import ChromaStore
from ..store.vectors.points import StoredWindow
from .abstain import NO_FLOOR, Floor, QueryFloor
from .evidence import NO_EVIDENCE, Evidence
from .gloss import gloss, has_han
from .language import other_language
from .legible import legible
from .lexical import (
    LEXICAL_MAX_TERMS,
    LexicalRanker,
    is_keywords,
    lexical_text,
    matching,
    weighed_text,
)
from .present import Presenter

# The query's definition is query.py's (light: the CLI parses before it loads anything).
from .query import (  # noqa: F401
    CORPORA,
    DEFAULT_TOP_K,
    MAX_TEXT_BYTES,
    MAX_TEXTS,
    MAX_TOP_K,
    QueryError,
    SourceQuery,
)
from .texts import WindowTexts

DEFAULT_RRF_K = 60
RERANK_POOL = 20  # windows the presenter ranks again (docs/benchmarks.md)
_WORDY = re.compile(r"\w", re.UNICODE)


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
    # The hits' text and lines, from the event log the store was opened with.
    texts: WindowTexts = field(init=False)

    def __post_init__(self) -> None:
        self.texts = WindowTexts(self.store.eventlog)

    # The model shared with the pipeline: a search goes first (models/turns.py).
    turns: ModelTurns | None = None
    # A room's label now (None: the one its windows were stored with), and the rooms a
    # room filter covers (its upgrade chain; None: the room alone).
    label_of: Callable[[RoomID], str] | None = None
    topic_of: Callable[[RoomID], str] | None = None
    chain_of: Callable[[RoomID], Sequence[RoomID]] | None = None
    # Called after each search, from the thread that ran it (the service hands back what
    # searches freed once they pause: appservice/homeserver/heap.py).
    on_searched: Callable[[], None] | None = None

    def search(self, query: SourceQuery) -> list[Hit]:
        return self.search_with_closest(query)[0]

    def search_with_closest(self, query: SourceQuery) -> tuple[list[Hit], Hit | None]:
        """The hits, and when the floor left none, the closest one below it (what
        `!sources why 1` explains after a "nothing matches"). One query turn of the
        model: indexing waits meanwhile."""
        try:
            with self.turns.query() if self.turns is not None else nullcontext():
                return self._search(query)
        finally:
            if self.on_searched is not None:
                self.on_searched()

    def _search(self, query: SourceQuery) -> tuple[list[Hit], Hit | None]:
        # A duplicated text must not count twice: query each distinct text once.
        texts = list(dict.fromkeys(query.texts))
        if not any(_WORDY.search(t) for t in texts):
            return [], None  # "?", "!!!", emoji only: nothing to look for
        evidence = self._evidence(texts)
        # A script the model only spells out (indexer/search/legible.py): its vector says
        # nothing, so only windows holding the query's words may answer.
        words_only = self._words_only(texts)
        if words_only and not evidence.held_anywhere:
            return [], None
        # The presenter ranks a pool again by the windows' matched questions.
        depth = max(query.top_k, RERANK_POOL) if self.presenter is not None else query.top_k
        # A text in Chinese is also searched as its English gloss (gloss.py): by the
        # words and the meaning of English chat. The floor stays the question's own:
        # its script's margin, the words it shares (an off-topic question's gloss
        # shares words like "first" or "time" with any chat).
        df = self._chat_df() if any(map(has_han, texts)) else None
        asked = list(dict.fromkeys(texts + [g for g in (gloss(t, df) for t in texts) if g]))
        # Ask for more than depth per list so fusion can promote agreement.
        fusing = len(asked) > 1 or any(lexical_text(t, self.lexical_max_terms) for t in asked)
        n = max(depth * 4, 20) if fusing else depth
        vectors = self.embedder.encode(asked)
        scored = self._with_similarity(*self._retrieve(query, asked, vectors, depth, n), vectors)
        floor = self._floor(texts, evidence, words_only)
        if self.presenter is not None:  # the floor compares what the presenter ranks by
            return self.presenter.present_above(scored, vectors, query.top_k, floor, evidence)
        hits = [
            h
            for h in scored
            if floor is None
            or (h.similarity is not None and h.similarity >= floor.needed(h.bodies))
        ]
        closest = (
            None
            if hits or not scored
            else max(scored, key=lambda h: h.similarity if h.similarity is not None else -2.0)
        )
        return hits[: query.top_k], closest

    def floor_for(self, texts: Sequence[str]) -> QueryFloor | None:
        """The floor a search of these texts was judged by (what `why 1` explains after
        "nothing matches"); None without a configured floor."""
        if self.floor is None:
            return None
        texts = list(dict.fromkeys(texts))
        return self._floor(texts, self._evidence(texts), self._words_only(texts))

    def _words_only(self, texts: list[str]) -> bool:
        """A script the model only spells out (legible.py): its vector says nothing."""
        tokenize = self.embedder.tokenize if isinstance(self.embedder, Tokenizer) else None
        return not legible(texts, tokenize)

    def _floor(self, texts: list[str], evidence: Evidence, words_only: bool) -> QueryFloor | None:
        """The query's floor: its words, its script's margin, its language."""
        if self.floor is None and not words_only:
            return None
        return (self.floor or Floor(NO_FLOOR)).for_query(
            texts, evidence, words_only, other_language(texts, self.embedder)
        )

    def _chat_df(self) -> Callable[[str], int] | None:
        """How many windows hold a term, from the keyword postings once built: what a
        Chinese word's sense is chosen by (gloss.py). None before they are: a scan per
        sense would take seconds."""
        if not self.lexical_max_terms:
            return None
        ranker = _lexical_ranker(self.store)
        return ranker.df if ranker.index is not None else None

    def _evidence(self, texts: list[str]) -> Evidence:
        """The query's terms weighed by rarity (evidence.py; for a question in another
        script, lexical.weighed_text); none without a keyword leg."""
        if not self.lexical_max_terms:
            return NO_EVIDENCE
        ranker = _lexical_ranker(self.store)
        asked = [weighed_text(t, self.lexical_max_terms) for t in texts]
        return Evidence.of(
            asked,
            ranker.df,
            ranker.total(),
            any(is_keywords(t, self.lexical_max_terms) for t in asked),
        )

    @staticmethod
    def _with_similarity(
        hits: list[Hit], found: dict[str, list[float]], vectors: list
    ) -> list[Hit]:
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
        """The keyword leg's ranked ids, one list per text it searches (lexical_text)."""
        ranker = _lexical_ranker(self.store)
        asked = [lexical_text(t, self.lexical_max_terms) for t in texts]
        return [ids for ids in (ranker.rank(t, n, where) for t in asked if t) if ids]

    def _retrieve(
        self, query: SourceQuery, texts: list[str], vectors: list, depth: int, n: int
    ) -> tuple[list[Hit], dict[str, list[float]]]:
        """The first `depth` windows of the fused ranking (n per vector, and the
        keyword leg's lists), and the vectors of those only the keyword leg found. (Run
        beside the encode in a thread, the leg made searches slower: both want the GIL
        between the model's native calls.)"""
        where = _where(query, self.chain_of)
        if n == depth:  # one text, not fused: its list is the hits, records and all
            neighbours = self.store.nearest(vectors, n, where, records=True)
            per_text = [[(nb.window_id, nb.similarity) for nb in lst] for lst in neighbours]
            fused: list[tuple[str, float]] = [
                (wid, 1.0 / (self.rrf_k + r)) for r, (wid, _) in enumerate(per_text[0], start=1)
            ]
            records = [nb.window for nb in neighbours[0] if nb.window is not None]
            found: dict[str, list[float]] = {}
        else:
            # Fused, each list is longer than what is kept: ids and similarities first,
            # then the records of the fused few in one call (Chroma's metadata for 20
            # results a list cost 1.3 ms of a 4 ms search at 100,000 windows, and a
            # keyword hit the vectors missed a second call, 0.9 ms; bench/query.py).
            per_text = [
                [(nb.window_id, nb.similarity) for nb in lst]
                for lst in self.store.nearest(vectors, n, where)
            ]
            lists: list[list[str]] = [[wid for wid, _ in lst] for lst in per_text]
            if self.lexical_max_terms:
                lists += self._lexical_lists(texts, n, where)
            if len(lists) == 1:
                fused = [(wid, 1.0 / (self.rrf_k + r)) for r, wid in enumerate(lists[0], start=1)]
            else:
                fused = rrf(lists, self.rrf_k)
            # The keyword leg's best stay in the pool whatever the vectors think: a
            # window holding a pasted token is what its searcher wants (evidence.py).
            keep = {wid for lst in lists[len(per_text) :] for wid in lst[:depth]}
            fused = fused[:depth] + [f for f in fused[depth:] if f[0] in keep]
            dense = {wid for lst in per_text for wid, _ in lst}
            fetched = self.store.get_with_vectors([wid for wid, _ in fused])
            records = [w for w, _ in fetched]
            # Their vectors give the keyword leg's finds a similarity.
            found = {w.window_id: v for w, v in fetched if w.window_id not in dense}
        # Texts are read for the windows kept only (0.6 ms of a 4 ms search).
        by_id: dict[str, tuple[StoredWindow, str, tuple[Line, ...]]] = {
            w.window_id: (w, text, lines)
            for w, (text, lines) in zip(records, self.texts.read(records))
        }
        # Per text: its dense rank and cosine similarity (None when it did not find it).
        ranks: list[dict[str, tuple[int, float]]] = [
            {wid: (r, sim) for r, (wid, sim) in enumerate(lst, 1)} for lst in per_text
        ]
        hits = []
        for wid, score in fused:
            got = by_id.get(wid)
            if got is None:  # deleted between the two legs' reads
                continue
            w, text, lines = got
            hits.append(
                Hit(
                    w.window_id,
                    w.room_id,
                    (self.label_of(w.room_id) if self.label_of else "") or w.room_label,
                    w.corpus,
                    w.event_ids,
                    w.senders,
                    w.ts_first,
                    w.ts_last,
                    score,
                    text,
                    tuple(r.get(wid) for r in ranks),
                    ref=w.ref,
                    lines=lines,
                    room_topic=self.topic_of(w.room_id) if self.topic_of else "",
                )
            )
        return hits, found


# While the keyword index of an event log from before it is built (the service's first
# start: store/eventlog/keywords.py), the word leg would scan the event log instead,
# which takes seconds past this many windows (bench/scale.py): it waits for the index,
# and the text is searched by meaning alone meanwhile.
SCAN_WINDOWS_MAX = 20_000


def _lexical_ranker(store: ChromaStore) -> LexicalRanker:
    texts = WindowTexts(store.eventlog)

    def fetch(ids: list[str]) -> dict[str, tuple[str, ...]]:
        if not ids:
            return {}
        windows = store.get(ids)
        return {
            w.window_id: bodies_of(w.corpus, text, lines)
            for w, (text, lines) in zip(windows, texts.read(windows))
        }

    # The keyword index in the event log, once built (keywords.py).
    eventlog = store.eventlog
    terms = eventlog.keywords if eventlog is not None and eventlog.keywords.ready() else None
    if eventlog is not None and terms is None and store.count() > SCAN_WINDOWS_MAX:
        # The index still building, and a scan would take seconds a term: no word leg
        # yet, and every term weighs the same (df 0).
        return LexicalRanker(lambda base, prefix, where: [], fetch, store.count, None)
    return LexicalRanker(
        lambda base, prefix, where: matching(store, base, prefix, where), fetch, store.count, terms
    )


def _where(
    query: SourceQuery, chain_of: Callable[[RoomID], Sequence[RoomID]] | None = None
) -> dict | None:
    clauses: list[dict] = []
    if query.room_id:
        rooms = list(chain_of(query.room_id)) if chain_of else [query.room_id]
        if len(rooms) > 1:  # an upgraded room: its predecessors' windows too
            clauses.append({"room_id": {"$in": sorted(rooms)}})
        else:
            clauses.append({"room_id": query.room_id})
    if query.corpus:
        clauses.append({"corpus": query.corpus})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}
