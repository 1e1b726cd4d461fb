"""Word evidence: how much of a query's words a window holds, rare words weighing more.

    weight(t)  idf of the query term t in the collection (a term no window holds
               weighs most: "sourdough starter" is not answered by a window that
               holds "starter" alone)
    share(w)   sum of weight(t) over the terms window w holds / sum over all terms

A pasted error code, an identifier or a rare name is what a person searches for when
they type it; a window holding it is evidence whatever the model makes of it (the model
reads `ECONNREFUSED` as a few word pieces of no meaning: cosine 0.30 to the stack trace
that carries it). So the presenter ranks by meaning plus share (present.py), and the
abstain rule does not refuse a window that holds most of the query's weight or an
exact token of it (abstain.py). Terms and keys come from the one tokenizer (tokens.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .tokens import base_of, keys, matchable, matches, tokens

MAX_TERMS = 16
# An identifier typed in capitals ("ECONNREFUSED", "EACCES", "HTTP"): an exact token.
_CAPS = re.compile(r"(?<![\w])[A-Z][A-Z0-9_]{2,}(?![\w])")
# A share at least this much: the window holds what the query asks for (most of its
# weight), not one word of a sentence.
MOST = 0.6
# A bare number of one or two digits ("3 am", "Formula 1") or an ordinal ("90th"): in a
# sentence the model reads it is a word, not a pasted identifier; a status code or a
# port ("502", "8080") stays one. Typed as search words ("android 4"), or in a question
# the model does not read, it is one of the few things shared with the chat and stays
# exact (docs/benchmarks.md, "Everyday questions").
_SMALL_NUMBER = re.compile(r"\d{1,2}|\d+(?:st|nd|rd|th)")


def idf(total: int, df: int) -> float:
    return math.log(1 + (total - df + 0.5) / (df + 0.5))


def exact_tokens(texts: Iterable[str]) -> frozenset[str]:
    """The query's terms that are identifiers rather than words: made of letters and
    digits or joined by connectors (`ext4`, `max_bytes`, `nginx.conf`, `2.6.8`), or
    typed in capitals (`ECONNREFUSED`)."""
    out: set[str] = set()
    for t in texts:
        found = tokens(t)
        out.update(w for w in found if not w.isalpha())
        for m in _CAPS.finditer(t):
            out.update(tokens(m.group()))
    return frozenset(out)


def small_number(term: str) -> bool:
    """A number of one or two digits, or an ordinal (_SMALL_NUMBER)."""
    return _SMALL_NUMBER.fullmatch(term) is not None


@dataclass(eq=False)  # holds a cache: compared and hashed by identity
class Evidence:
    """The query's terms with their weights; `share` and `holds_exact` of a window."""

    weights: dict[str, float]
    exact: frozenset[str] = frozenset()
    keywords: bool = False  # search-box words, not a sentence (lexical.is_keywords)
    present: bool = False  # some window holds one of the terms
    _cache: dict[tuple[str, ...], tuple[float, frozenset[str], int]] = field(
        default_factory=dict, repr=False
    )

    @classmethod
    def of(
        cls, texts: Iterable[str], df: Callable[[str], int], total: int, keywords: bool = False
    ) -> Evidence:
        texts = list(texts)
        terms = list(dict.fromkeys(t for text in texts for t in tokens(text)))[:MAX_TERMS]
        weights, present = {}, False
        for t in terms:
            n = df(t)
            weights[t] = idf(max(total, n), n)
            present = present or n > 0
        return cls(weights, exact_tokens(texts) & set(weights), keywords, present)

    @property
    def held_anywhere(self) -> bool:
        """Whether some stored window holds one of the query's terms."""
        return self.present

    def _judge(self, bodies: Sequence[str]) -> tuple[float, frozenset[str], int]:
        key = tuple(bodies)
        got = self._cache.get(key)
        if got is None:
            found = {k for part in matchable(key) for k in keys(part)}
            held = [t for t in self.weights if any(matches(*base_of(t), k) for k in found)]
            total = sum(self.weights.values())
            got = (
                sum(self.weights[t] for t in held) / total if total else 0.0,
                frozenset(t for t in held if t in self.exact),
                len(held),
            )
            self._cache[key] = got
        return got

    def words_held(self, bodies: Sequence[str]) -> int:
        """How many of the query's terms the bodies hold, whatever their weight."""
        return self._judge(bodies)[2]

    def share(self, bodies: Sequence[str]) -> float:
        """Of the query's weight, the part a window's bodies (Hit.bodies, or one line's)
        hold: 0 to 1."""
        return self._judge(bodies)[0]

    def holds_exact(self, bodies: Sequence[str], small_numbers: bool = True) -> bool:
        """Whether the bodies hold one of the query's exact tokens (small numbers
        aside, when told)."""
        held = self._judge(bodies)[1]
        return any(small_numbers or not small_number(t) for t in held)

    def answers(self, bodies: Sequence[str], sentence: bool = False) -> bool:
        """A window the abstain rule must not refuse: it holds most of the query's
        weight, or an exact token of it. Of a sentence the model reads, only an exact
        token that is no small number: its meaning is what was asked, and "why is the
        sky blue" is not answered by a link to sky.net (abstain.py)."""
        if sentence:
            return self.holds_exact(bodies, small_numbers=False)
        return self.holds_exact(bodies) or self.share(bodies) >= MOST


NO_EVIDENCE = Evidence({})
