"""The keyword leg's one tokenizer, which lives below the store (indexer/tokens.py): the
event log cuts the keyword index's keys with it, search cuts query terms with it."""

from ..tokens import (
    MAX_PARTS,
    MIN_STEM,
    STOP_WORDS,
    base_of,
    borrowed,
    doc_keys,
    is_word,
    keys,
    matchable,
    matches,
    normalise,
    script,
    stem,
    tokens,
)

__all__ = [
    "MAX_PARTS",
    "MIN_STEM",
    "STOP_WORDS",
    "base_of",
    "borrowed",
    "doc_keys",
    "is_word",
    "keys",
    "matchable",
    "matches",
    "normalise",
    "script",
    "stem",
    "tokens",
]
