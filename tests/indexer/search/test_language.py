"""Which texts the shipped English model reads as English (indexer/search/language.py),
with its real vocabulary: the Gitter dev questions' translations, and a note only for an
English-only model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from matrix_sources.indexer.models.embedder import load_embedder
from matrix_sources.indexer.search.language import (
    english_only_note,
    english_share,
    not_english_share,
    other_language_note,
    reads_english,
)
from tests.paths import SHARED

XL = (
    Path(os.environ.get("MATRIX_SOURCES_EVAL_ROOT") or SHARED / "eval")
    / "gitter"
    / "dev-queries-xl.jsonl"
)


@pytest.fixture(scope="module")
def minilm():
    return load_embedder("all-MiniLM-L6-v2", "onnx-int8")


def test_too_few_words_say_nothing():
    assert english_share("ntfs-3g?", {"ntfs"}) is None
    assert reads_english("ok", {"ok"}) is None
    assert not_english_share(["", "ok"], {"ok"}) == (0.0, 0)


@pytest.mark.skipif(not XL.is_file(), reason="the eval sets are not here")
def test_the_dev_questions_read_as_their_language(minilm):
    vocab = minilm.words()
    rows = [json.loads(line) for line in XL.read_text(encoding="utf-8").splitlines() if line]
    english = [r["query_en"] for r in rows if r["lang"] == "de"]
    assert sum(reads_english(q, vocab) is True for q in english) / len(english) >= 0.95
    for lang in ("de", "es", "ru", "zh"):
        asked = [r["query"] for r in rows if r["lang"] == lang]
        share, told = not_english_share(asked, vocab)
        assert told >= len(asked) * 0.9 and share >= 0.6, (lang, share, told)


def test_the_note_is_the_english_only_models(minilm):
    note = english_only_note(minilm)
    assert note is not None
    assert note(["How do I mount an NTFS partition at boot?"]) == ""
    assert "multilingual-e5-small+all-MiniLM-L6-v2" in note(["Как смонтировать раздел NTFS?"])
    assert other_language_note(["¿Cómo monto una partición NTFS al arrancar?"], minilm.words())


def test_no_note_for_a_model_that_reads_other_languages():
    class E5Like:  # encodes, but has no English vocabulary to tell by
        name = "intfloat/multilingual-e5-small"

    assert english_only_note(E5Like()) is None
    assert english_only_note(object()) is None


def test_the_vocabulary_is_read_once(minilm):
    """Every search of an English-only index asks for it (language.other_language):
    reading the tokenizer's 30,000 entries each time cost 10 to 20 ms a search."""
    assert minilm.words() is minilm.words()
    assert "partition" in minilm.words() and "##s" not in minilm.words()
