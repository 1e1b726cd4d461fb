"""The abstain rule: when a hit is too far from the question to be shown.

A hit is shown when its score (the presenter's: half the window's similarity to the
query, half its matched line's) reaches `search.min_similarity` and the window shares a
word with the question (the keyword leg's terms and stems, stop words aside), or, when
it shares none, reaches the floor plus `search.no_shared_word_margin` (or the margin
`search.no_shared_word_margin_by_script` sets for the question's script). Meaning alone
must be stronger than meaning with a word in common: a question about banana bread or
golf lands near some chat at about 0.35 by the model's general sense of "a question",
while an answer phrased in other words than the question ("disk" in both, or neither)
is what dense retrieval is for. A window that holds most of the query's weight in words
(rare words weighing more) or one of its exact tokens (`ECONNREFUSED`, `max_bytes`) is
never refused: the words are what was asked for (evidence.py). Not so for a question
written as a sentence the model reads (two English stop words, or one and a "?":
lexical.is_sentence): there only an exact token counts, and not a number of one or two
digits. Its meaning is what was asked, and everyday questions ("How far is the moon
from the earth?", "Why do I wake up at 3 am?") found a window holding "earthling" and
"far", or a "3", in any chat. And a sentence is answered only when one hit of its reply
holds two of its words or reaches the margin (QueryFloor.needed_first): "Which terminal
does British Airways use at Heathrow?" shares one word with "do you know any good
terminals?". Calibrated on the three dev sets and the off-topic questions
(docs/benchmarks.md, "Abstain" and "Everyday questions").

The margin is per script because a model's sense of "a question" is not the same in
every script: multilingual-e5-small puts an off-topic question in Chinese as near to
English chat (0.84 to 0.86) as a real one, but one in Russian well below the floor
(0.77 to 0.80), while a real Russian question often names the thing in Russian and so
shares no word with its English answer (docs/multilingual.md, "Abstain per language").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .evidence import MOST, NO_EVIDENCE, Evidence
from .language import OtherLanguage
from .lexical import is_sentence, stem, words
from .tokens import script

NO_FLOOR = -1.0  # what a window holding the query's words needs: any similarity
# How many of a sentence's words (its terms, stop words aside) one hit of a reply must
# hold to answer it at the floor of a shared word (QueryFloor.needed_first): one word in
# common is a coincidence of words, two are a topic (docs/benchmarks.md, "Everyday
# questions").
WORDS_ENOUGH = 2


def words_of(text: str) -> frozenset[str]:
    """The words a text is matched by: stems, stop words aside (lexical.py)."""
    return frozenset(stem(w) for w in words(text))


@dataclass(frozen=True)
class Floor:
    min_similarity: float
    no_shared_word_margin: float = 0.0
    # The margin for a question written mostly in this script (tokens.script), instead.
    margin_by_script: Mapping[str, float] = field(default_factory=dict, hash=False)

    def for_query(
        self,
        texts: Iterable[str],
        evidence: Evidence = NO_EVIDENCE,
        words_only: bool = False,
        other_language: OtherLanguage | None = None,
    ) -> QueryFloor:
        texts = list(texts)
        margin = self.no_shared_word_margin
        if self.margin_by_script:  # the question's script is read only when it matters
            margin = self.margin_by_script.get(script("\n".join(texts)) or "", margin)
        return QueryFloor(
            self,
            frozenset().union(*(words_of(t) for t in texts)),
            evidence,
            words_only,
            margin,
            other_language,
            # Only where the model reads it: otherwise the words are all there is.
            all(map(is_sentence, texts)) and not words_only and other_language is None,
        )


@dataclass(frozen=True)
class QueryFloor:
    """The floor for one query's hits: it depends on the words a hit shares with it."""

    floor: Floor
    words: frozenset[str]
    evidence: Evidence = NO_EVIDENCE
    # The model cannot read the query (legible.py): only windows holding its words.
    words_only: bool = False
    margin: float = 0.0  # above the floor for a hit sharing no word (Floor.for_query)
    # A question in a language the English-only model does not read (language.py).
    other_language: OtherLanguage | None = None
    # Every text is a sentence (lexical.is_sentence), not search words, and the model
    # reads it: its meaning is what was asked (held, needed_alone).
    sentence: bool = False

    def shares_word(self, bodies: Sequence[str]) -> bool:
        return bool(self.words & words_of("\n".join(bodies)))

    def in_same_language(self, bodies: Sequence[str], matched: str | None = None) -> bool:
        """A question in a language the English-only model does not read, and a hit it
        can only have met by language: the window or its matched line is in another
        language too, or, for a question in Latin letters, the hit shares no word with
        it outside its lines in another language (there "la" or "con" is the language's
        word, not the topic's; language.OtherLanguage)."""
        other = self.other_language
        if other is None:
            return False
        return (
            other.reads_foreign("\n".join(bodies))
            or matched is not None
            and other.reads_foreign(matched)
            or other.latin
            and not self.shares_word([b for b in bodies if not other.reads_foreign(b)])
        )

    def held(self, bodies: Sequence[str]) -> bool:
        """Whether the bodies hold the query's words (evidence.answers): never refused."""
        return self.evidence.answers(bodies, sentence=self.sentence)

    def needed_alone(self, bodies: Sequence[str], matched: str | None = None) -> float:
        """What a hit that quotes one line, and nothing answered, must reach for a
        sentence the model reads: as much as one sharing no word, unless it holds most
        of the sentence's words ("the mirror at osprey-live-3c1 moved to the new rack"
        for "where did the mirror move") or an exact token. Everyday questions met IRC's
        lone small talk ("night all :)", "it's time for sleeping") through one shared
        word; a conversation that answered is evidence, one word of a single line is
        not. Search words keep needed's floor."""
        return self._unless(bodies, matched, self.evidence.share(bodies) >= MOST)

    def needed_first(self, bodies: Sequence[str], matched: str | None = None) -> float:
        """What one hit of a reply to a sentence the model reads must reach for the
        reply to be given at all: as much as one sharing no word, unless it holds two of
        the sentence's words (WORDS_ENOUGH; its only one, if it has one) or an exact
        token. One word in common, in another sense, is no evidence that the chat
        answers the question: "Which terminal does British Airways use at Heathrow?" met
        "do you know any good terminals?", "How do I fix a leaking tap?" a line about tap
        actions. Once one hit answers, the others keep needed's floor: a second answer
        to a real question may share one word of it. Search words keep needed's floor."""
        enough = min(WORDS_ENOUGH, len(self.evidence.weights))
        return self._unless(bodies, matched, self.evidence.words_held(bodies) >= enough)

    def _unless(self, bodies: Sequence[str], matched: str | None, evidence: bool) -> float:
        """For a sentence the model reads, the floor of a hit sharing no word, unless
        `evidence` (what the bodies hold of its words) or an exact token (needed's
        NO_FLOOR); needed's floor otherwise."""
        need = self.needed(bodies, matched)
        if not self.sentence or need == NO_FLOOR or math.isinf(need) or evidence:
            return need
        return max(need, self.floor.min_similarity + self.margin)

    def needed(self, bodies: Sequence[str], matched: str | None = None) -> float:
        """The score a hit whose bodies (Hit.bodies) are these must reach to be shown;
        `matched`: its line closest to the question, when the presenter found it."""
        if self.held(bodies):
            return NO_FLOOR
        if self.words_only or self.in_same_language(bodies, matched):
            return math.inf
        return self.floor.min_similarity + (0.0 if self.shares_word(bodies) else self.margin)
