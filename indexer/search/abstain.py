"""The abstain rule: when a hit is too far from the question to be shown.

A hit is shown when its score (the presenter's: half the window's similarity to the
query, half its matched line's) reaches `search.min_similarity` and the window shares a
word with the question (the keyword leg's terms and stems, stop words aside), or, when
it shares none, reaches the floor plus `search.no_shared_word_margin`. Meaning alone
must be stronger than meaning with a word in common: a question about banana bread or
golf lands near some chat at about 0.35 by the model's general sense of "a question",
while an answer phrased in other words than the question ("disk" in both, or neither)
is what dense retrieval is for. Calibrated on both dev sets and the off-topic questions
(docs/benchmarks.md, "Abstain").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .lexical import stem, words


def words_of(text: str) -> frozenset[str]:
    """The words a text is matched by: stems, stop words aside (lexical.py)."""
    return frozenset(stem(w) for w in words(text))


@dataclass(frozen=True)
class Floor:
    min_similarity: float
    no_shared_word_margin: float = 0.0

    def for_query(self, texts: Iterable[str]) -> QueryFloor:
        return QueryFloor(self, frozenset().union(*(words_of(t) for t in texts)))


@dataclass(frozen=True)
class QueryFloor:
    """The floor for one query's hits: it depends on the words a hit shares with it."""

    floor: Floor
    words: frozenset[str]

    def shares_word(self, text: str) -> bool:
        return bool(self.words & words_of(text))

    def needed(self, text: str) -> float:
        """The score a hit whose text is `text` must reach to be shown."""
        f = self.floor
        return f.min_similarity + (0.0 if self.shares_word(text) else f.no_shared_word_margin)
