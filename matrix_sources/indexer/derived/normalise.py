"""The one normaliser of the derived filter, and the word shingles built on it.

The same function runs when an artifact is emitted (a `!sources` answer, a reference
section) and when a message is judged, so what the bot emitted and what someone pasted
back reduce to the same words whatever dressed them up on the way:

    Matrix reply fallback (replyfallback.py; `<mx-reply>`)          -> dropped
    HTML entities, then tags of HTML's own names                    -> text
    Markdown: code fences, links (text kept, URL dropped), tables,
              list numbers, emphasis, headings, quotes              -> text
    bare URLs                                                      -> dropped
    invisible characters, combining marks, TR39 confusables         -> as read
      (ingest/skeleton.py: zero-width, soft hyphen, bidi controls... dropped inside words,
       the way the model's tokenizer drops them; Cyrillic `а` -> `a`)
    Unicode NFKC, case folded, words = runs of letters and digits   -> "w1 w2 w3"

Underscores split words (`_emphasis_` and `snake_case` both reduce the same on both
sides), and punctuation never makes a word, so table pipes and separator rows vanish.
Drifting apart here is the failure the seed warns about: overlap collapses and the
filter silently stops firing. tests/indexer/derived/test_normalise.py pins both paths together.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterable, Sequence

import numpy as np

from ..ingest.replyfallback import strip_reply_fallback
from ..ingest.skeleton import drop_invisible, reader_text

_MX_REPLY = re.compile(r"<mx-reply>.*?</mx-reply>", re.IGNORECASE | re.DOTALL)
_HTML_TAGS = (
    "a|abbr|b|big|blockquote|br|caption|code|del|details|div|dl|dd|dt|em|font|h[1-6]|hr|i|"
    "img|ins|kbd|li|mark|ol|p|pre|q|s|samp|small|span|strike|strong|sub|summary|sup|table|"
    "tbody|td|tfoot|th|thead|tr|tt|u|ul|var|mx-reply"
)
# Only tags of HTML's names: `kubectl logs <pod>` keeps its placeholder as a word.
_TAG = re.compile(rf"</?(?:{_HTML_TAGS})(?:\s[^<>]*)?/?>", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\((?:[^()\s]+)(?:\s+\"[^\"]*\")?\)")
_AUTOLINK = re.compile(r"<(?:https?|mailto|matrix):[^<>\s]*>", re.IGNORECASE)
_URL = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)
_LIST_NUMBER = re.compile(r"^\s*\d{1,9}[.)](?=\s)", re.MULTILINE)
# Letters and digits only: `_` and every punctuation mark separate words.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

# Shingle hashes are stored in the manifest: changing these invalidates it.
_MULTIPLIER = np.uint64(0x100000001B3)  # odd (FNV-1's 64-bit prime)
WORD_HASH_CACHE = 200_000
_WORD_HASHES: dict[str, int] = {}


def _markup_to_text(text: str) -> str:
    # Each step only when its marker is there: most chat messages carry no markup.
    if "<" in text or "&" in text:
        text = _MX_REPLY.sub(" ", text)
        # Entities first: `&lt;code&gt;` in HTML and `<code>` in a plain body are one string.
        text = _AUTOLINK.sub(" ", _TAG.sub(" ", html.unescape(text)))
    if "](" in text:
        text = _IMAGE_OR_LINK.sub(r" \1 ", text)
    if "://" in text or "www." in text or "WWW." in text:
        text = _URL.sub(" ", text)
    if "```" in text or "~~~" in text:
        text = "\n".join(line for line in text.split("\n") if not _FENCE.match(line))
    return _LIST_NUMBER.sub(" ", text)


def words(text: str) -> list[str]:
    """The normalised words of a text, in order."""
    # Invisibles go first too: one inside a tag or a fallback's `> <@` would hide it.
    text = drop_invisible(text.replace("\r\n", "\n").replace("\r", "\n"))
    return _WORD.findall(reader_text(_markup_to_text(strip_reply_fallback(text))))


def normalise(text: str) -> str:
    """The normalised text: its words joined by single spaces."""
    return " ".join(words(text))


def _word_hash(word: str) -> int:
    h = _WORD_HASHES.get(word)
    if h is None:
        if len(_WORD_HASHES) >= WORD_HASH_CACHE:
            _WORD_HASHES.clear()
        h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "big")
        _WORD_HASHES[word] = h
    return h


def shingle_hashes(ws: Sequence[str], size: int) -> np.ndarray:
    """The hash of every run of `size` consecutive words (uint64, repeats kept): a
    polynomial over the words' own hashes, so each word is hashed once (and cached: a
    community's vocabulary is small) and the runs are combined in a few vector ops.
    A text shorter than one shingle gives one hash of all its words."""
    if not ws:
        return np.empty(0, dtype=np.uint64)
    wh = np.fromiter((_word_hash(w) for w in ws), dtype=np.uint64, count=len(ws))
    size = min(size, len(ws))
    n = len(ws) - size + 1
    out = wh[:n].copy()
    for j in range(1, size):
        out *= _MULTIPLIER  # wraps modulo 2**64, as intended
        out += wh[j : j + n]
    return out


def shingles(ws: Sequence[str], size: int) -> frozenset[int]:
    """Distinct shingle hashes of a word sequence."""
    return frozenset(shingle_hashes(ws, size).tolist())


def text_shingles(text: str, size: int) -> frozenset[int]:
    return shingles(words(text), size)


def sha256_normalised(text: str) -> str:
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()


def containment(message: Iterable[int], section: Iterable[int]) -> float:
    """|M ∩ S| / |M|: how much of the message is made of the section. Reference only
    for tests and audits; the matcher computes it through the inverted index."""
    m, s = set(message), set(section)
    return len(m & s) / len(m) if m else 0.0
