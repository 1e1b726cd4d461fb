"""Whether the English model reads a text as English: what the shipped model's
"nothing matches" says about a question in another language, and what `doctor` counts
in a room's recent messages (docs/multilingual.md, "The shipped model and other
languages").

The measure is the pair's (pair_embedder.py): the share of a text's letter-words that
are whole entries of all-MiniLM-L6-v2's vocabulary. The three dev sets' English
questions read 0.70 to 1.00; the Gitter questions in German 0.25 to 0.70, Spanish 0.31
to 0.83, Russian and Chinese under 0.45. No list of languages: any language the English
model does not know reads low. Nothing measured here is stored or logged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..models.ports import EnglishVocabulary
from ..tokens import script

PAIR = "multilingual-e5-small+all-MiniLM-L6-v2"
_LETTER_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
MIN_WORDS = 3  # shorter texts ("ok", "ntfs-3g?") say nothing of their language
JUDGED = True  # OtherLanguage applies (off: the benchmark's "before")
# A text reads as English from this share of known words (the English questions of the
# three dev sets read 0.70 and up; the pair gives English weight from 0.7).
READS_ENGLISH_FROM = 0.6


def english_share(text: str, vocabulary: frozenset[str] | set[str]) -> float | None:
    """The share of the text's letter-words the English model knows whole; None when
    it has too few words to tell."""
    words = [w.lower() for w in _LETTER_WORD.findall(text)]
    if len(words) < MIN_WORDS:
        return None
    return sum(w in vocabulary for w in words) / len(words)


def reads_english(text: str, vocabulary: frozenset[str] | set[str]) -> bool | None:
    share = english_share(text, vocabulary)
    return None if share is None else share >= READS_ENGLISH_FROM


def foreign(text: str, vocabulary: frozenset[str] | set[str]) -> bool | None:
    """Whether the English model reads the text as another language: written mostly in
    a script other than Latin, or of Latin letter-words it mostly does not know. None
    when it is too short to tell."""
    written = script(text)
    if written is not None and written != "latin":
        return True
    english = reads_english(text, vocabulary)
    return None if english is None else not english


@dataclass(frozen=True)
class OtherLanguage:
    """A question that an English-only model does not read as English. Its vector and a
    text's in another language meet by the language they share, not by what they say
    (a Spanish question about cooking eggs landed at 0.51 on "hola algun argentino" in
    the Ubuntu chat), and an English text about that language ("we cant speak spanish
    here?") comes near it too: abstain.py shows such hits only for the question's words.
    """

    vocabulary: frozenset[str]
    # Written in Latin letters: English chat can share its words (a product's name, a
    # command); in another script it shares none, and its gloss (gloss.py) reaches it.
    latin: bool

    def reads_foreign(self, text: str) -> bool:
        return bool(foreign(text, self.vocabulary))


def other_language(texts: Sequence[str], embedder: object) -> OtherLanguage | None:
    """The question as OtherLanguage, for an English-only model that knows its words and
    a question (every text of it) that it reads as another language; None otherwise."""
    if not JUDGED or not isinstance(embedder, EnglishVocabulary):
        return None
    vocabulary = embedder.words()
    if not texts or not all(foreign(t, vocabulary) for t in texts):
        return None
    return OtherLanguage(vocabulary, script("\n".join(texts)) == "latin")


def not_english_share(
    texts: Iterable[str], vocabulary: frozenset[str] | set[str]
) -> tuple[float, int]:
    """(share of the texts with enough words that do not read as English, how many
    had enough words)."""
    told = [r for r in (reads_english(t, vocabulary) for t in texts) if r is not None]
    return (sum(not r for r in told) / len(told) if told else 0.0), len(told)


def other_language_note(texts: Sequence[str], vocabulary: frozenset[str] | set[str]) -> str:
    """What "nothing matches" adds for a question the English model does not read as
    English ('' for one it does): the model, and the one line that changes it."""
    if not any(reads_english(t, vocabulary) is False for t in texts):
        return ""
    return (
        "This question does not read as English, and this index uses an English-only "
        "model. An admin can set `index.embedder.model: "
        f"{PAIR}` in config.yaml to search other languages (every message is embedded "
        "again at the next start; see docs/multilingual.md)."
    )


def english_only_note(embedder: object) -> Callable[[Sequence[str]], str] | None:
    """The note for an English-only embedder that knows its vocabulary (all-MiniLM-L6-v2
    on ONNX); None for a model that reads other languages (the pair, e5: they have no
    English vocabulary of their own to tell by) or one whose words are not at hand."""
    if not isinstance(embedder, EnglishVocabulary):
        return None
    vocabulary = embedder.words()
    return lambda texts: other_language_note(texts, vocabulary)
