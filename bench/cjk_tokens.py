"""The keyword leg's Chinese: character bigrams (indexer/search/tokens.py) against a
segmenter, jieba, on what a word typed alone finds.

    .venv/bin/python bench/cjk_tokens.py        # needs `pip install jieba` (not a dependency)

Texts: the Gitter dev questions in Chinese (`../shared/eval/gitter/dev-queries-xl.jsonl`,
read at run time; MIT, Shi et al. 2021, translated for this project) and the Chinese room
written for the tests (tests/fixtures/rooms/zh.json). Words searched: every word of two
or more Han characters either segmenter cuts from them (jieba's, and CC-CEDICT's longest
match from indexer/search/gloss.py), so neither tokenizer picks the words it is judged on;
the keyword leg's stop words ("怎么", "一下"...) aside, which neither searches.
A text holds a word when the word is a substring of it. Each tokenizer indexes every text
by its keys and finds a word when every one of the word's own terms is a key of the text:

    bigrams  keys: tokens.keys (overlapping character bigrams); terms: tokens.tokens
    jieba    keys: jieba.cut_for_search (words and their sub-words, the search-engine
             mode); terms: jieba.lcut of the word

Prints, per tokenizer: recall (texts holding the word that are found), precision (found
texts that hold it), keys per text, and the time to cut the texts.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import evalkit  # noqa: E402

from matrix_sources.indexer.search import gloss  # noqa: E402
from matrix_sources.indexer.search.tokens import STOP_WORDS, keys, tokens  # noqa: E402

HAN = re.compile(r"^[\u3400-\u4dbf\u4e00-\u9fff]{2,}$")


def texts() -> list[str]:
    xl = evalkit.datasets()["gitter"].root / "dev-queries-xl.jsonl"
    out = [
        json.loads(line)["query"]
        for line in open(xl, encoding="utf-8")
        if json.loads(line).get("lang") == "zh"
    ]
    room = evalkit.REPO / "tests" / "fixtures" / "rooms" / "zh.json"
    out += [body for _, body, _ in json.loads(room.read_text(encoding="utf-8"))["messages"]]
    return out


def main() -> int:
    import jieba

    jieba.setLogLevel(60)
    docs = texts()
    words = sorted(
        (
            {w for d in docs for w in jieba.lcut(d) if HAN.match(w)}
            | {w for d in docs for w in gloss.words(d) if HAN.match(w)}
        )
        - STOP_WORDS
    )
    t = time.perf_counter()
    by_bigram = [set(keys(d)) for d in docs]
    t_bigram = time.perf_counter() - t
    t = time.perf_counter()
    by_jieba = [set(jieba.cut_for_search(d)) for d in docs]
    t_jieba = time.perf_counter() - t
    print(f"{len(docs)} Chinese texts, {len(words)} words searched")
    print(f"{'tokenizer':10} {'recall':>8} {'precision':>10} {'keys/text':>10} {'cut ms':>8}")
    for name, index, terms_of, took in [
        ("bigrams", by_bigram, tokens, t_bigram),
        ("jieba", by_jieba, lambda w: jieba.lcut(w), t_jieba),
    ]:
        held = found = both = 0
        missed: list[str] = []
        for w in words:
            terms = terms_of(w)
            for d, ks in zip(docs, index):
                has, hit = w in d, bool(terms) and all(x in ks for x in terms)
                held += has
                found += hit
                both += has and hit
                if has and not hit and len(missed) < 6:
                    missed.append(w)
        print(
            f"{name:10} {both / held:8.3f} {both / max(found, 1):10.3f} "
            f"{sum(map(len, index)) / len(docs):10.1f} {took * 1000:8.1f}"
            + (f"   missed e.g. {' '.join(dict.fromkeys(missed))}" if missed else "")
        )
    ds = evalkit.datasets()["gitter"]
    print("\n" + evalkit.attribution(ds.root, ds.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
