"""The one tokenizer of the keyword leg, below the store (which cuts the keyword index's
keys with it) and search (query terms, through indexer/search/tokens.py): what a message
is indexed by and what a query is searched by are made by the same functions, so every
token of a message is found when it is searched by itself (tests/indexer/search/
test_tokens.py checks it as a property).

    text --NFKC, casefold--> runs of letters and digits, by script
         Han, Hiragana, Katakana, Hangul: overlapping character bigrams ("数据库" is
                 "数据", "据库"; a lone character is itself), as CJK search engines do:
                 these scripts do not put spaces between words (Korean does, but
                 glues its particles on: "서버가" must be found by "서버")
         any other script (Latin, Cyrillic, Greek, Arabic, Hebrew...): words
    runs joined by one connector (_ . - + # ' or a trailing ++ / #) make a compound:
         "max_bytes", "menu.lst", "2.6.8", "utf-8", "e_codes", "c++", "c#", "don't"

A message's keys are each word, each compound, and each part of a compound made of
consecutive runs ("2.6.8" also gives "2.6" and "6.8"; "max_bytes" gives "max" and
"bytes"), at most MAX_PARTS runs long. A query's terms are its compounds whole (a pasted
`ECONNREFUSED`, `nginx.conf` or `v2.6` is looked up as typed), its words and bigrams,
stop words aside. A term matches a key equal to it; an alphabetic term of five letters
or more also matches the words starting with its stem ("partitions" finds
"partitioning"; stem()).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import lru_cache

MAX_PARTS = 6  # runs in one key ("1.2.3.4.5.6" has 6): a longer compound gives no whole key
MIN_STEM = 5  # words shorter than this match whole ("rar" must not find "rare")
_ENDINGS = ("ings", "ing", "ies", "es", "ed", "s")

# Scripts written without spaces between words: bigrams. Ranges from Unicode's blocks:
# CJK ideographs (and extensions, compatibility), Hiragana, Katakana (and phonetic
# extensions, halfwidth forms), Hangul syllables and jamo.
_BIGRAM = (
    "\u1100-\u11ff\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31bf"
    "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af"
    "\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
_CJK = re.compile(f"[{_BIGRAM}]+")
# A run: letters, digits and combining marks, none of the bigram scripts.
_RUN = rf"[^\W_{_BIGRAM}]+(?:\u200d+[^\W_{_BIGRAM}]*)*"
# A compound: runs joined by single connectors; "c++", "c#", "f#" end on them.
_COMPOUND = re.compile(rf"{_RUN}(?:[_.\-+#']{_RUN})*(?:\+\+|#|\+)?")
_RUN_RE = re.compile(_RUN)
_CONNECTOR = re.compile(r"[_.\-+#']")  # what joins runs; a compound without one is a run

# Function words of questions and chat; they carry no topic. Short on purpose: a
# domain word ("file", "install") must stay, idf weighs it.
STOP_WORDS = (
    frozenset(
        """
a about after again all also am an and any are as at be because been before being
but by can could did do does doing don done for from get gets getting got had has
have having he her here hers him his how i if im in into is it its itself just let
lets like me might more most much must my no nor not now of off on once only or other
our out over own same she should so some such than that the their them then there
these they this those through to too under until up very was way we were what when
where which while who whom why will with would you your yours anyone anybody someone
something thing things there's it's i'm can't don't doesn't isn't won't please thanks
hi hello hey yes yeah ok okay still really need want try trying tried know use using
used make makes made way one ones instead even ever every without
s t
""".split()
    )
    | frozenset(
        # Chinese, as bigrams: question and function words ("how", "what", "time", "can",
        # "we", "this", "not have"...), which a cooking question shares with any chat.
        """怎么 什么 为什么 如何 怎样 时间 可以 需要 我们 你们 他们 这个 那个 这样 那样 没有
    一下 一个 就是 还是 已经 应该 因为 所以 但是 如果 现在 知道 觉得 大家 多少 请问 谢谢
    的话 不是 是不 有没 能不""".split()
    )
    | frozenset(
        # Russian: the same kind of words ("how", "what", "this", "can", "need"...).
        """и в во на не с со по для у же ли мы вы я он она они оно так а но или то бы как
    что это этот эта эти где когда почему зачем можно нужно надо если уже ещё еще есть
    был была было были быть мне меня нас вас их его её ее кто какой какая какие""".split()
    )
)


def normalise(text: str) -> str:
    """NFKC and casefold: "ＥＣＯＮＮ" and "econn", "Straße" and "strasse" meet."""
    return unicodedata.normalize("NFKC", text).casefold()


def _bigrams(run: str) -> Iterator[str]:
    if len(run) == 1:
        yield run
    for i in range(len(run) - 1):
        yield run[i : i + 2]


def _parts(compound: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _RUN_RE.finditer(compound)]


def keys(text: str) -> Iterator[str]:
    """Every key of a text (repeats kept: a key's count is its term frequency)."""
    text = normalise(text)
    for m in _CJK.finditer(text):
        yield from _bigrams(m.group())
    for c in _COMPOUND.findall(text):
        if _CONNECTOR.search(c) is None:  # one run: most words (the index cuts every body)
            yield c
        else:
            yield from _compound_keys(c)


def _compound_keys(c: str) -> Iterator[str]:
    """The keys of a compound holding a connector: its runs, their joins, the whole."""
    runs = _parts(c)
    if len(runs) == 1:
        yield c
        return
    tail = c[runs[-1][1] :]  # "++" or "#" after the last run
    for a in range(len(runs)):
        for b in range(a, min(a + MAX_PARTS, len(runs))):
            end = runs[b][1] + (len(tail) if b == len(runs) - 1 else 0)
            yield c[runs[a][0] : runs[b][1]]
            if end != runs[b][1]:
                yield c[runs[a][0] : end]
    if len(runs) > MAX_PARTS:
        yield c  # the whole, however long: a pasted identifier is found as typed


def tokens(text: str) -> list[str]:
    """The terms a text is searched by, in order, once each: its words and compounds
    whole, and its bigrams, stop words aside."""
    text = normalise(text)
    out = [b for m in _CJK.finditer(text) for b in _bigrams(m.group())]
    out += [m.group() for m in _COMPOUND.finditer(text)]
    return [
        t
        for t in dict.fromkeys(out)
        if t not in STOP_WORDS and t.replace("'", "") not in STOP_WORDS
    ]


def _latin(term: str) -> bool:
    return all(c.isascii() or "LATIN" in unicodedata.name(c, "") for c in term if c.isalpha())


def borrowed(text: str) -> list[str]:
    """The Latin-script terms of a text written mostly in another script: the names and
    technical terms a Chinese or Russian question keeps in English (`docker-machine`,
    `502`), which are what it shares word for word with a room that speaks English.
    [] when most of its terms are Latin script (a German question is searched as
    itself)."""
    found = tokens(text)
    latin = [t for t in found if _latin(t)]
    return latin if 2 * len(latin) < len(found) else []


def script(text: str) -> str | None:
    """The script most of a text's terms (tokens()) are written in, by the first word of
    their letters' Unicode names, lower case: "latin", "cyrillic", "greek", "arabic",
    "hebrew", "cjk" (Han), "hiragana", "hangul"...; None for a text without letters.
    Terms, not letters: a Russian question is Cyrillic although its one English term
    (`docker-machine`) has more letters than its Russian words."""
    counts: dict[str, int] = {}
    for term in tokens(text):
        first = next((c for c in term if c.isalpha()), None)
        if first is not None:
            name = unicodedata.name(first, "").split(" ", 1)[0].lower()
            if name:
                counts[name] = counts.get(name, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


def is_word(key: str) -> bool:
    """One run of letters and digits (no connector): what a stem prefix can match."""
    return _RUN_RE.fullmatch(key) is not None


# Scripts that tell a word's language well enough for its Snowball stemmer: Cyrillic
# (Russian's; Ukrainian or Bulgarian words lose less than they would gain), Greek. A
# Latin word's language is not told by its letters: it gets the light English strip.
# Not Arabic: its stemmer strips prefixes ("ال"), and a stem matches as a key prefix.
_SNOWBALL = {"cyrillic": "russian", "greek": "greek"}


@lru_cache(maxsize=1)
def _stemmers() -> dict[str, object]:
    import snowballstemmer

    return {lang: snowballstemmer.stemmer(lang) for lang in set(_SNOWBALL.values())}


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A word's stem, matched as a prefix of the keys (base_of): Snowball's for a
    Cyrillic or Greek word ("бэкапы" and "бэкапов" meet at "бэкап"), else a light suffix
    strip, enough that English plural and -ing/-ed forms meet. A stem that is not a
    prefix of its word, or shorter than MIN_STEM - 1 letters, leaves the word whole."""
    if len(word) < MIN_STEM or not word.isalpha():
        return word
    lang = _SNOWBALL.get(unicodedata.name(word[0], "").split(" ", 1)[0].lower())
    if lang is not None:
        base = _stemmers()[lang].stemWord(word)  # type: ignore[attr-defined]
        return base if len(base) >= MIN_STEM - 1 and word.startswith(base) else word
    for end in _ENDINGS:
        if word.endswith(end) and len(word) - len(end) >= MIN_STEM - 1:
            base = word[: -len(end)]
            if end in ("ing", "ings", "ed") and len(base) > MIN_STEM - 1 and base[-1] == base[-2]:
                base = base[:-1]  # spinning -> spin, stopped -> stop; not filled -> fil
            # The stem stays a prefix (MIN_STEM - 1 letters or more): a shorter one
            # matches whole words only and would find nothing ("missing" -> "mis").
            return base
    return word


def base_of(term: str) -> tuple[str, bool]:
    """The term's stem, and whether it matches as a key prefix (else a whole key)."""
    base = stem(term)
    return base, len(base) >= MIN_STEM - 1 and base.isalpha() and not _CJK.search(base)


def matches(base: str, prefix: bool, key: str) -> bool:
    """Whether a term (its base_of) matches a key."""
    return key == base or (prefix and key.startswith(base) and is_word(key))


def matchable(texts: Iterable[str]) -> list[str]:
    """The parts the keyword leg matches in, one per line (keys never span a line
    break): of a chat window, its message bodies; of a reference chunk, its text."""
    return [line for text in texts for line in text.split("\n")]


def doc_keys(texts: Iterable[str]) -> tuple[int, Counter[str]]:
    """(length in whitespace words, count of each key) of a window's bodies or a
    chunk's text: what the keyword index stores of it (BM25's length and tf)."""
    # One pass over the bodies joined: no key spans a line break (no run or connector is
    # one), and a compound's keys are cut once however often it is said.
    text = "\n".join(matchable(texts))
    norm = normalise(text)
    counts = Counter(_COMPOUND.findall(norm))
    # Most words are one run (isalnum: no connector, no joiner); the rest are cut apart.
    cut = [c for c in counts if not c.isalnum() and _CONNECTOR.search(c) is not None]
    parts: Counter[str] = Counter()
    for c in cut:
        n = counts.pop(c)
        for k in _compound_keys(c):
            parts[k] += n
    counts.update(parts)
    counts.update(b for m in _CJK.finditer(norm) for b in _bigrams(m.group()))
    return len(text.split()), counts
