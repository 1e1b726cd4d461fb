"""What an embedder offers: the `Embedder` every one is, and the capabilities some add.

A caller that can use a capability asks with `isinstance` (the capabilities are
runtime-checkable protocols), never by probing for a member's name:

    Embedder        name, dim, backend, encode                    every embedder
    EachEncoder     encode_each: each text from a call of its own  ONNX, the pair, QuerySide
    QueryEncoder    encode_queries: a query side ("query: ")       E5, the pair
    Tokenizer       tokenize: the model's word pieces              torch, ONNX (legible.py)
    PassEncoder     passes: a call run a forward pass at a time    ONNX (models/turns.py)
    QueryProjector  passage_as_query: a passage vector as a query  the pair (present.py)

Each module that loads another embedder's module imports only this one, so the pair
(pair_embedder.py) is typed without importing embedder.py, which loads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np


class Embedder(Protocol):
    """Every embedder: L2-normalised vectors, so cosine similarity is a dot product."""

    name: str
    dim: int
    backend: str

    def encode(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class EachEncoder(Protocol):
    """Its own faster way to give each text the vector of a call of its own."""

    def encode_each(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class QueryEncoder(Protocol):
    """A model trained with a query and a passage side: `encode_queries` embeds what a
    person asks, `encode` everything else."""

    def encode_queries(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class EnglishVocabulary(Protocol):
    """An English-only model that knows its whole words (all-MiniLM-L6-v2 on ONNX): what
    a question in another language is told by (indexer/search/language.py)."""

    def words(self) -> frozenset[str]: ...


@runtime_checkable
class Tokenizer(Protocol):
    """A model that can spell a text it cannot read: its word pieces (legible.py)."""

    def tokenize(self, text: str) -> list[str]: ...


@runtime_checkable
class PassEncoder(Protocol):
    """A call run one forward pass at a time: (the call's indices, their vectors) per
    pass, the same vectors as `encode` (models/turns.py takes a turn per pass)."""

    def passes(self, texts: Sequence[str]) -> Iterator[tuple[list[int], list[list[float]]]]: ...


@runtime_checkable
class QueryProjector(Protocol):
    """A passage vector (of `text`) turned into a query's without the model: what a
    response is compared with when matched against a question line (present.py)."""

    def passage_as_query(self, vector: Sequence[float] | np.ndarray, text: str) -> list[float]: ...
