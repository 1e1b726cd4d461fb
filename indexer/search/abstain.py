"""The abstain rule: when a hit is too far from the question to be shown.

A hit is shown when its score (the presenter's: half the window's similarity to the
query, half its matched line's) reaches `search.min_similarity` and the window shares a
word with the question (the keyword leg's terms and stems, stop words aside), or, when
it shares none, reaches the floor plus `search.no_shared_word_margin`. Meaning alone
must be stronger than meaning with a word in common: a question about banana bread or
golf lands near some chat at about 0.35 by the model's general sense of "a question",
while an answer phrased in other words than the question ("disk" in both, or neither)
is what dense retrieval is for. A window that holds most of the query's weight in words
(rare words weighing more) or one of its exact tokens (`ECONNREFUSED`, `max_bytes`) is
never refused: the words are what was asked for (evidence.py). Calibrated on the three
dev sets and the off-topic questions (docs/benchmarks.md, "Abstain").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from .evidence import NO_EVIDENCE, Evidence
from .lexical import stem, words

NO_FLOOR = -1.0  # what a window holding the query's words needs: any similarity


def words_of(text: str) -> frozenset[str]:
    """The words a text is matched by: stems, stop words aside (lexical.py)."""
    return frozenset(stem(w) for w in words(text))


@dataclass(frozen=True)
class Floor:
    min_similarity: float
    no_shared_word_margin: float = 0.0

    def for_query(self, texts: Iterable[str], evidence: Evidence = NO_EVIDENCE,
                  words_only: bool = False) -> QueryFloor:
        return QueryFloor(self, frozenset().union(*(words_of(t) for t in texts)), evidence,
                          words_only)


@dataclass(frozen=True)
class QueryFloor:
    """The floor for one query's hits: it depends on the words a hit shares with it."""

    floor: Floor
    words: frozenset[str]
    evidence: Evidence = NO_EVIDENCE
    # The model cannot read the query (legible.py): only windows holding its words.
    words_only: bool = False

    def shares_word(self, bodies: Sequence[str]) -> bool:
        return bool(self.words & words_of("\n".join(bodies)))

    def held(self, bodies: Sequence[str]) -> bool:
        """Whether the bodies hold the query's words (evidence.answers): never refused."""
        return self.evidence.answers(bodies)

    def needed(self, bodies: Sequence[str]) -> float:
        """The score a hit whose bodies (Hit.bodies) are these must reach to be shown."""
        if self.held(bodies):
            return NO_FLOOR
        if self.words_only:
            return math.inf
        f = self.floor
        return f.min_similarity + (0.0 if self.shares_word(bodies) else f.no_shared_word_margin)
