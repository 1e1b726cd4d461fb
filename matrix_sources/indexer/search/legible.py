"""Whether the model can read a text at all.

all-MiniLM-L6-v2 learned English word pieces. A text in a script it never learned
(Arabic, Hebrew, Cyrillic...) comes out of its tokenizer spelled letter by letter, and
its vector says nothing about its meaning: measured on both dev sets, an Arabic cooking
question landed closer to Ubuntu chat (cosine 0.64) than most real questions to their
answers. Such a query gets "nothing matches" rather than confident noise.

Only a model that spells is judged: an embedder without `tokenize` reads every script
it is given. multilingual-e5-small (index.embedder.model; docs/multilingual.md) has none:
it learned some 100 languages' word pieces, and a question in Russian, Arabic or Chinese
is embedded and searched like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

MIN_PIECES = 4  # shorter texts ("c++", "ext3") are judged by the similarity floor alone
MAX_SPELLED = 0.6  # share of one-letter pieces above which the model is spelling


def spelled_out(pieces: Sequence[str]) -> bool:
    """True when most of a text's word pieces are single letters: the model is
    spelling it, not reading it. Punctuation and digits are left out."""
    letters = [p.lstrip("#") for p in pieces]
    letters = [p for p in letters if p and any(c.isalpha() for c in p)]
    if len(letters) < MIN_PIECES:
        return False
    return sum(1 for p in letters if len(p) == 1) / len(letters) > MAX_SPELLED


def legible(texts: Sequence[str], tokenize: Callable[[str], list[str]] | None) -> bool:
    """Whether the model can read any of the texts (always, without a tokenizer)."""
    return tokenize is None or any(not spelled_out(tokenize(t)) for t in texts)
