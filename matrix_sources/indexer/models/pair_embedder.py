"""Two models in one vector: all-MiniLM-L6-v2 for English, multilingual-e5-small for the rest.

multilingual-e5-small reads about 100 languages but misses English answers the English
model finds: on the Ubuntu chat's dev questions it ranks the one-command answers far
down (`pwd` at 328 by its vector alone, `uname -r` at 208; all-MiniLM-L6-v2 at 1 and
4), 0.939 success@5 against 1.000 (docs/multilingual.md, "Both models in one
vector"). A window is embedded by both, and one vector holds both, so the store, its
segments, compaction and every withdrawal keep one vector a window as with one model:

    window  w = [w_en ; w_mul ; 1] / sqrt(3)           (unit; each part is a unit vector)
    query   q = sqrt(3) * [a * q_en ; (1 - a) * q_mul ; a * (F_MUL - F_EN)]
    q . w   = a * (cos_en - F_EN) + (1 - a) * (cos_mul - F_MUL) + F_MUL

where a is the English model's share of the question (`english_share`). The similarity
is each model's cosine measured from that model's own calibrated floor (F_EN, F_MUL:
config.MODEL_FLOORS), so one floor, F_MUL, holds whatever the share: a question the
English model cannot read (a = 0) is searched and floored exactly as with
multilingual-e5-small alone. The store reports the dot product with the query as given
(Chroma's cosine space normalises the query; chroma.py scales it back), so the
presenter's line scores, a keyword hit's similarity and Chroma's agree.

The share is how much of the question the English model reads as words: the share of
its letter-words that are whole entries of all-MiniLM-L6-v2's vocabulary (English
questions of the three dev sets: 0.70 to 1.00, median 0.93; the same questions in
German 0.25 to 0.70, Spanish 0.31 to 0.83, Russian and Chinese under 0.45), mapped
linearly from 0 at SHARE_FROM to ENGLISH_WEIGHT at SHARE_FULL. No list of languages: a
question in any language the English model does not know gets the multilingual model
alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from .ports import EachEncoder, Embedder, QueryEncoder

# The English model's weight in a question it reads wholly, and the vocabulary shares
# between which it grows from 0 (docs/multilingual.md, "Both models in one vector":
# weights 0.3, 0.4, 0.5 through the whole search path; 0.5 kept every English dev
# set's success@5 at the English model's or above, and the other languages at e5's).
# SHARE_FROM is fitted with the abstain floor (bench/heldout.py, QUERY_SETTINGS).
ENGLISH_WEIGHT = 0.5
SHARE_FROM, SHARE_FULL = 0.7, 0.9
_LETTER_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def _each(model: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Each text from a call of its own (embedder.encode_each; this module cannot import
    embedder.py, which loads it)."""
    if isinstance(model, EachEncoder):
        return model.encode_each(texts)
    return [model.encode([t])[0] for t in texts]


class PairEmbedder:
    """The Embedder protocol over an English and a multilingual embedder (module doc)."""

    backend = "q4"  # the multilingual model's; the English one runs on onnx-int8

    def __init__(
        self,
        english: Embedder,
        multilingual: Embedder,
        floors: tuple[float, float],
        vocabulary: frozenset[str] | set[str],
    ) -> None:
        self.english, self.multilingual = english, multilingual
        self.floor_en, self.floor_mul = floors
        self.vocabulary = vocabulary
        self.name = f"{english.name}+{multilingual.name}"
        self.dim = english.dim + multilingual.dim + 1
        self.batches = 0

    def english_share(self, text: str) -> float:
        """The English model's weight for this query text: 0 .. ENGLISH_WEIGHT."""
        words = [w.lower() for w in _LETTER_WORD.findall(text)]
        if not words:
            return 0.0
        known = sum(w in self.vocabulary for w in words) / len(words)
        return ENGLISH_WEIGHT * min(1.0, max(0.0, (known - SHARE_FROM) / (SHARE_FULL - SHARE_FROM)))

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """Windows, answer lines, reference sections: both models' passage vectors."""
        if not texts:
            return []
        self.batches += 1
        return self._joined(self.english.encode(texts), self.multilingual.encode(texts))

    def encode_each(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._joined(_each(self.english, texts), _each(self.multilingual, texts))

    def encode_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """What a person asks, weighed by the English model's share of it."""
        if not texts:
            return []
        en = np.asarray(self.english.encode(texts), dtype=np.float64)
        mul_side = (
            self.multilingual.encode_queries
            if isinstance(self.multilingual, QueryEncoder)
            else self.multilingual.encode
        )
        return self._asked(en, np.asarray(mul_side(texts), dtype=np.float64), texts)

    def passage_as_query(self, vector: Sequence[float] | np.ndarray, text: str) -> list[float]:
        """A window or line vector (of `text`) turned into a query's, without the models:
        what a response is compared with when it is matched against a question line
        (present.py). Two passage vectors' plain dot product would weigh both models
        evenly, the English one's cosines between lines it cannot read included."""
        v = np.asarray(vector, dtype=np.float64) * math.sqrt(3)
        n = self.english.dim
        return self._asked(v[None, :n], v[None, n : n + self.multilingual.dim], [text])[0]

    def _asked(self, en: np.ndarray, mul: np.ndarray, texts: Sequence[str]) -> list[list[float]]:
        share = np.asarray([self.english_share(t) for t in texts])[:, None]
        shift = share * (self.floor_mul - self.floor_en)
        return (math.sqrt(3) * np.hstack([share * en, (1 - share) * mul, shift])).tolist()

    @staticmethod
    def _joined(en: list[list[float]], mul: list[list[float]]) -> list[list[float]]:
        a, b = np.asarray(en, dtype=np.float64), np.asarray(mul, dtype=np.float64)
        return (np.hstack([a, b, np.ones((len(a), 1))]) / math.sqrt(3)).tolist()
