"""What a person reads: each chat hit with the answers it carries and the lines to quote.

    hit (a window) --event log--> its messages, as they are now
        --encode (all hits' lines in one call)--> the matched question: the window's
                        line closest to the query
        --linkage.py--> the later messages that respond to the asker's lines, from
                        whichever window they are in, within the horizon
        --encode--> the lines to quote: the matched question, then the responses by
                    others that say most about it, chosen by meaning (when the matched
                    line is a link, also what its sender wrote just before it)

A response's score is its cosine similarity to the nearest query text plus its
similarity to the matched question (an answer often shares no words with the query
but speaks to the question). A line of a few characters ("yes", "?") says nothing on
its own and is quoted only when nothing longer responds. Text is read from the event
log when the hit is presented, so an edit shows its new text and a redacted message is
quoted nowhere: not in its window, not as anyone's answer.

Line vectors are kept in a small in-memory cache keyed by the text's hash (a hit's
lines come back query after query); they are never written anywhere.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..ingest.addressing import names
from ..models.embedder import Embedder, encode_each
from ..models.ports import QueryProjector
from ..pipeline.chunker import document
from ..records import CORPUS_CHAT, EventID, Hit, Line, Message, UserID, Window, WindowID
from ..store.eventlog.log import EventLog
from . import lines
from .abstain import QueryFloor
from .conversation import IMPLICIT, Conversations, Plan
from .evidence import NO_EVIDENCE, Evidence
from .linkage import Horizon, addressees, speakers
from .tokens import tokens

MAX_ANSWERS = 12  # linked answers carried (and cited) per hit
SHOWN_LINES = 3  # lines quoted per hit: the matched question and the best responses
# A hit's `similarity`, which the floor compares (abstain.py): half the window's cosine
# to the query, half its matched question's (a window mixing topics is not refused when
# one of its lines is the question).
LINE_WEIGHT = 0.5
# The order, what a person reads first: the window, its matched question, and the
# closest of the responses to it, each by cosine to the query. The conversation that
# answers comes before one that only asks the same (docs/benchmarks.md: success@1 on
# all three dev sets; 0.1 to 0.2 for the responses gave the same).
RANK_WINDOW, RANK_LINE, RANK_ANSWER = 0.4, 0.45, 0.15
# How much the share of the query's words a window holds (evidence.py) adds to that
# order: for a sentence, a nudge; for search-box words, enough that the windows holding
# them come first (docs/benchmarks.md).
WORD_WEIGHT = 0.1
WORD_WEIGHT_KEYWORDS = 1.0
# A response quoted or carried must come this close (cosine) to the query or to the
# matched question (issue 26: a line addressed to the asker is not an answer by that
# alone); calibrated on the three dev sets (docs/benchmarks.md).
ANSWER_FLOOR = 0.1  # a linked answer, from another window
RESPONSE_FLOOR = 0.05  # a response inside the window (the conversation it is in)
# A window line that is no response is quoted only this close to the query: else fewer
# lines are quoted.
LINE_FLOOR = 0.3
# Issue 51: a hit quotes its conversation only. The window's other lines do not pad it
# (PAD_WITH_WINDOW off); the asker's follow-ups are quoted (FOLLOW_UPS); a response
# linked only by its place (the next speaker, a burst: IMPLICIT) must come this close to
# the query or the question (a new topic started right after is not an answer).
PAD_WITH_WINDOW = False
# A window holding the query's words with the messages its lines reply to, this many
# replies back, is never refused (abstain.py: the words are what was asked for).
REPLY_HOPS = 3
FOLLOW_UPS = True
IMPLICIT_FLOOR = 0.25
# A question back is quoted after what its sender said later, not asking, when that
# scores at least this share of it ("thats all i can think" does not; docs/benchmarks.md).
SUPERSEDED = True
SUPERSEDE_RATIO = 0.5
# A response after the best one is quoted only when it scores at least this share of
# the best's (None: as many as SHOWN_LINES leaves room for): fewer lines, not padding.
CLOSE_TO_BEST: float | None = None
# A response linked only by its place (IMPLICIT: the next speaker, the rest of a burst)
# from another window is quoted after the best response only when that one is such a
# line too, or asks back: beside an answer that replies, names the asker or shares the
# question's window, it was most often the responder's next topic (issue 51: quote
# precision@1 up on the three dev sets, shown@1 the same; docs/benchmarks.md).
PLACE_NOT_BESIDE = True
# A matched line that answers someone who asked ("MOUD: it depends on your terminal")
# is one side of their dialogue: of the responses from later chat, only the asker's
# lines and Matrix replies to it are quoted. Others who address its sender then ("nacc:
# http://paste...") bring their own questions to the one who answered; they are still
# carried and cited (issue 51: Ubuntu's quote precision@1 0.954 -> 0.979, the rest the
# same; docs/benchmarks.md).
ANSWERS_ONE = True
# A response linked only by its place that is a question of its own, from another than
# the matched line's sender, naming and replying to no one, is someone's new topic (a
# question put to the room between a question and its answer): carried and cited, not
# quoted (issue 51: Gitter's and Slack's quote precision@1 up, the rest the same;
# docs/benchmarks.md).
PLACE_ASKS_OWN = True
# A matched line that itself answers someone (a reply, a pill, a leading "@name") is
# its own hit's response in the order: the answer, not a question nobody answered.
# Not a leading "name:", which on IRC nearly every line has (it cost Ubuntu there).
ANCHOR_ANSWERS = True
# A line linked only by its place that thanks, from another than the asker, is no
# answer ("appium btw is very great thx guys"): carried and cited, not quoted.
RESPONDER_THANKS = True
# A response the asker thanked is carried, however far its words are from the question.
THANKED = True
# An asker's line right after her question that turns to someone the question did not
# address and who did not respond is an aside to them, not quoted as a follow-up
# ("kylegordon_twitter: on 2 different machines too").
ASIDES = True
# A hit whose matched line a hit above already quotes or carries is that conversation
# again (its question's window and its answer's, hours apart): it is left out and the
# next conversation takes its place (docs/benchmarks.md). For search-box words, only
# when the lines of the window holding them are quoted or carried above too.
ONE_CONVERSATION = True
_LEAD_AT = re.compile(r"\s*@\w")
# The next speaker after the question, from later chat, below IMPLICIT_FLOOR, is quoted
# when no other response is: "Good question. I don't believe so." under "is gitter open
# source?" is the answer a question alone would hide (Gitter shown@1 up, nothing else).
NEXT_ALONE = True
# For a sentence the model reads, a reply is given only when one of its hits reaches
# needed_first (abstain.QueryFloor.needed_first): otherwise nothing matches.
FIRST = True
# A response the asker thanked that falls under the answer floor ("@Andreas you want
# -f") is quoted where the hit has room after the responses that speak to the question:
# her thanks says it answered (Slack shown@1 up, nothing else).
THANKED_QUOTED = True
ONCE_BY = "rank"  # which hit keeps an answer linked under several: rank, meaning, time
# A hit that is the later part of a conversation whose question a hit below asks (the
# lower hit links its matched line as a response, and its asker speaks in the upper
# hit's window) is shown from that question: one hit, the question and its best
# answers quoted, the later part's lines carried and cited (docs/benchmarks.md).
FROM_QUESTION = True
# A question nobody answered (no response quoted or carried) gives its place to the
# same person's other asking among the hits that was answered: "anyone have any ideas
# on recovering rm'd files on ext3?" after "how hard is it to recover files deleted
# from a hdd?", which got the tools (docs/benchmarks.md).
ASKED_AGAIN = True
# How far down the order those two look: the default top_k, so a reply's first hits are
# the same whatever top_k is asked.
MOVE_WITHIN = 5
# A yes/no question's first response that opens with yes or no is quoted first: the
# direct answer ("No, Gitter Enterprise isn't yet released."), before the same person's
# later lines that the query's words are closer to (Gitter shown@1 up, nothing else).
DIRECT = True
# For a sentence the model reads, a hit that quotes one line only needs the floor of a
# hit sharing no word, unless it holds an exact token (abstain.QueryFloor.needed_alone;
# docs/benchmarks.md, "Everyday questions").
ALONE = True
# A line a hit above already quotes is not quoted again under a lower hit of the same
# reply (it is still cited there): the lower hit quotes its other lines, or fewer.
QUOTED_ONCE = True
CACHE_LINES = 8192  # line vectors kept in memory (about 12 MiB at 384 dimensions)


@dataclass(slots=True)
class _Candidate:
    hit: Hit
    rank: int  # in the pool as found
    key: float  # the similarity the floor compares
    bonus: float  # for the words it holds
    order: float  # meaning, for the order (the responses are added once the floor kept it)
    found: tuple[list[Message], np.ndarray, int] | None = None  # lines, vectors, anchor


@dataclass
class Presenter:
    eventlog: EventLog
    embedder: Embedder
    horizon: Horizon = Horizon()
    shown_lines: int = field(default_factory=lambda: SHOWN_LINES)
    _cache: OrderedDict = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        self.conversations = Conversations(self.eventlog, self.horizon)

    def present(
        self,
        hits: Sequence[Hit],
        query_vectors: Sequence[Sequence[float]],
        top_k: int | None = None,
    ) -> list[Hit]:
        return self.present_above(hits, query_vectors, top_k)[0]

    def present_above(
        self,
        hits: Sequence[Hit],
        query_vectors: Sequence[Sequence[float]],
        top_k: int | None = None,
        floor: QueryFloor | None = None,
        evidence: Evidence = NO_EVIDENCE,
    ) -> tuple[list[Hit], Hit | None]:
        """The best `top_k` of the hits, with their answers and quoted lines. The hits
        the floor keeps (on `similarity`: the window's and its matched question's cosine
        to the query, `LINE_WEIGHT`) are ranked again by what a person would read first:
        the window, its matched question and its closest response (`RANK_*`), plus the
        share of the query's words it holds (evidence.py; `WORD_WEIGHT`, more for
        search-box words). A chat hit whose window has no message left (redacted
        meanwhile) is dropped; reference hits keep their similarity. For a sentence,
        none is shown unless one of them reaches needed_first (FIRST). Returns the hits,
        and when the floor left none, the closest."""
        queries = np.asarray(query_vectors, dtype=np.float32)
        cands = self._candidates(hits, queries, evidence)
        above = [
            c
            for c in cands
            if floor is None or c.key >= floor.needed(self._conversation_bodies(c), _matched(c))
        ]
        closest = None
        if not above and cands:
            best = min(cands, key=lambda c: (-(c.key + c.bonus), c.rank))
            closest = replace(best.hit, similarity=best.key)
        plans = self._plans(above, top_k)
        answers = [
            self._answers(p, c.found[2]) if p and c.found else ([], {})
            for c, p in zip(above, plans)
        ]
        answer_vecs = self._vectors([m.body for a, _ in answers for m, _ in a])
        outside_vecs = self._answered(above, plans, answers, answer_vecs, queries)
        order = sorted(
            range(len(above)), key=lambda i: (-(above[i].order + above[i].bonus), above[i].rank)
        )
        kept = order[:top_k] if top_k is not None else order
        if ONE_CONVERSATION and top_k is not None:  # those left out make room for these
            kept += [i for i in order[top_k:] if plans[i] is not None]
        kept_answers = _once(
            [answers[i] for i in kept],
            [f[1][f[2]] if plans[i] and (f := above[i].found) else None for i in kept],
            np.concatenate([outside_vecs[i] for i in kept] or [answer_vecs[:0]]),
            [_matched_line(above[i]) if plans[i] else None for i in kept],
        )
        typed = evidence if evidence.keywords else None  # search-box words

        def choose(i: int, ans: tuple[list[tuple[Message, str]], dict]) -> Hit:
            """The i-th candidate as a hit, quoting none of the lines quoted above it."""
            c, p = above[i], plans[i]
            assert c.found is not None and p is not None  # planned from its lines
            # _once keeps a hit's answers in their order: their vectors are those kept.
            stays = {m.event_id for m, _ in ans[0]}
            avecs = outside_vecs[i][[m.event_id in stays for m, _ in answers[i][0]]]
            window, vecs, anchor = c.found
            if QUOTED_ONCE and typed is not None and window[anchor].event_id in quoted:
                # Kept for another line holding the words (_again): matched on that one.
                anchor = _unquoted_anchor(window, vecs, queries, typed, quoted, anchor)
                if anchor != c.found[2]:  # its answers, but those a hit above carries (_once)
                    outside, linked = self._answers(p, anchor)
                    ans = ([a for a in outside if a[0].event_id not in covered], linked)
                    avecs = self._vectors([m.body for m, _ in ans[0]])
            h = self._choose(p, vecs, anchor, ans, avecs, queries, evidence, quoted)
            return replace(h, similarity=c.key)

        def first(c: _Candidate, h: Hit) -> bool:
            """Whether this hit lets the reply be given (QueryFloor.needed_first): its
            words are looked for in its window and in the answers it carries."""
            assert floor is not None
            carried = tuple(a.body for a in h.answers)
            return c.key >= floor.needed_first(
                (*self._conversation_bodies(c), *carried), _matched(c)
            )

        covered: set[str] = set()  # the lines quoted or carried by the hits so far
        quoted: set[str] = set()  # the lines quoted by the hits so far (QUOTED_ONCE)
        out: list[Hit] = []
        answered = floor is None or not FIRST  # a hit shown reaches needed_first
        alone: list[Hit] = []  # refused for quoting one line (QueryFloor.needed_alone)
        done: set[int] = set()  # hits placed before their rank (ASKED_AGAIN)

        within = set(order[:MOVE_WITHIN])

        def below(at: int):
            """The hits ranked below the at-th, among the first MOVE_WITHIN, not shown
            yet: a hit moves up from the same few whatever top_k is."""
            for j, lower in zip(kept[at + 1 :], kept_answers[at + 1 :]):
                if (
                    j in within
                    and plans[j] is not None
                    and j not in done
                    and not _again(above[j], covered, None)
                ):
                    yield j, lower

        for at, (i, ans) in enumerate(zip(kept, kept_answers)):
            if top_k is not None and len(out) == top_k:
                break
            c, p = above[i], plans[i]
            if i in done or ONE_CONVERSATION and _again(c, covered, typed):
                continue
            if p is None:
                out.append(c.hit)
                answered = answered or first(c, c.hit)
                continue
            h = choose(i, ans)
            if typed is None:  # search-box words: the window holding them first
                if FROM_QUESTION:
                    for j, lower in below(at):
                        if _starts(above[j], lower[1], c):
                            h = _from_question(choose(j, lower), h, lower[1])
                            break
                if ASKED_AGAIN and len(h.shown) == 1 and not h.answers:  # nobody answered
                    asker = h.shown[0].sender  # the question is all it quotes
                    for j, lower in below(at):
                        if (m := _matched_line(above[j])) and m.sender == asker:
                            again = choose(j, lower)  # their next asking in the order
                            if len(again.shown) > 1:
                                out.append(again)
                                answered = answered or first(above[j], again)
                                done.add(j)
                                covered |= {x.event_id for x in (*again.shown, *again.answers)}
                                quoted.update(x.event_id for x in again.shown)
                            break
                    if top_k is not None and len(out) == top_k:
                        break
            if (
                ALONE
                and floor is not None
                and len(h.shown) <= 1
                and c.key < floor.needed_alone(self._conversation_bodies(c), _matched(c))
            ):
                alone.append(h)
                continue
            out.append(h)
            covered |= {line.event_id for line in (*h.shown, *h.answers)}
            quoted.update(line.event_id for line in h.shown)
            answered = answered or first(c, h)
        if out and not answered:
            closest, out = out[0], []
        if not out and alone and closest is None:
            closest = alone[0]
        return out, closest

    def _candidates(
        self, hits: Sequence[Hit], queries: np.ndarray, evidence: Evidence
    ) -> list[_Candidate]:
        """Each hit with its matched question (the window's line closest to the query)
        and what the floor and the order read of it; a chat hit with no message left is
        dropped."""
        windows = [
            self.eventlog.texts.window_messages(h.window_id) if h.corpus == CORPUS_CHAT else None
            for h in hits
        ]
        flat = self._vectors([m.body for w in windows if w for m in w])
        words = WORD_WEIGHT_KEYWORDS if evidence.keywords else WORD_WEIGHT
        cands: list[_Candidate] = []
        at = 0
        for rank, (h, w) in enumerate(zip(hits, windows)):
            sim = h.similarity if h.similarity is not None else -1.0
            bonus = words * evidence.share(h.bodies)
            if w is None:  # reference: no lines of its own to match
                cands.append(_Candidate(h, rank, sim, bonus, sim))
                continue
            if not w:
                continue
            vecs = flat[at : at + len(w)]
            at += len(w)
            line_sims = (vecs @ queries.T).max(axis=1)
            # The matched question: the line closest to the query (the first of equals),
            # not one stuffed with its words over and over.
            fair = np.array([not lines.stuffed(m.body) for m in w])
            anchor = int(np.argmax(np.where(fair, line_sims, -2.0) if fair.any() else line_sims))
            line = float(line_sims[anchor])
            cands.append(
                _Candidate(
                    h,
                    rank,
                    (1 - LINE_WEIGHT) * sim + LINE_WEIGHT * line,
                    bonus,
                    RANK_WINDOW * sim + RANK_LINE * line,
                    (w, vecs, anchor),
                )
            )
        return cands

    def _plans(self, above: list[_Candidate], top_k: int | None) -> list[Plan | None]:
        """The conversation plan of each hit that could still reach the first top_k (or
        the first MOVE_WITHIN, which a hit may be moved up from); None for the rest."""
        # A response adds at most RANK_ANSWER, so a hit further than that below can not
        # (and is not read: planning and encoding responses is most of a search).
        reach = -np.inf
        k = max(top_k, MOVE_WITHIN) if top_k is not None else None
        if k is not None and len(above) > k:
            reach = sorted((c.order + c.bonus for c in above), reverse=True)[k - 1] - RANK_ANSWER
        return [
            self.conversations.plan(c.hit, c.found[0])
            if c.found and c.order + c.bonus >= reach
            else None
            for c in above
        ]

    @staticmethod
    def _answered(
        above: list[_Candidate],
        plans: list[Plan | None],
        answers: list[tuple[list[tuple[Message, str]], dict]],
        answer_vecs: np.ndarray,
        queries: np.ndarray,
    ) -> list[np.ndarray]:
        """Per hit, its linked answers' vectors (a slice of `answer_vecs`); each planned
        hit's order gains RANK_ANSWER times its closest response's cosine to the query."""
        outside_vecs: list[np.ndarray] = []
        at = 0
        for c, p, (outside, linked) in zip(above, plans, answers):
            avecs = answer_vecs[at : at + len(outside)]
            outside_vecs.append(avecs)
            at += len(outside)
            if p is None:
                continue
            assert c.found is not None  # planned from its lines
            w, vecs, anchor = c.found
            inside = [vecs[i] for i in range(anchor + 1, len(w)) if w[i].event_id in linked]
            resp = np.vstack([np.asarray(inside).reshape(-1, vecs.shape[1]), avecs])
            answered = float((resp @ queries.T).max()) if len(resp) else 0.0
            q = w[anchor]
            if ANCHOR_ANSWERS and (
                q.reply_to is not None
                or any(u != q.sender for u in q.mentions)
                or _LEAD_AT.match(q.body)
            ):
                answered = max(answered, float((vecs[anchor] @ queries.T).max()))
            c.order += RANK_ANSWER * min(max(answered, 0.0), 1.0)
        return outside_vecs

    def _conversation_bodies(self, c: _Candidate) -> tuple[str, ...]:
        """What the floor looks for the query's words in: the window's bodies, and those
        of the earlier messages its lines reply to (REPLY_HOPS back): "phones
        onboarding" is carol's question and her reply two lines later, cut into two
        windows (issue 51)."""
        if not REPLY_HOPS or not c.found:
            return c.hit.bodies
        earlier = self.eventlog.texts.replied_to(c.found[0], REPLY_HOPS)
        return (*c.hit.bodies, *earlier.values()) if earlier else c.hit.bodies

    def _answers(self, p: Plan, anchor: int) -> tuple[list[tuple[Message, str]], dict]:
        """The linked answers from outside the window (at most MAX_ANSWERS), and the
        ids of every response, in the window or not, with the rule that linked it."""
        linked = self.conversations.responses(p, anchor)
        in_window = {m.event_id for m in p.window}
        outside = [a for a in linked if a[0].event_id not in in_window][:MAX_ANSWERS]
        return outside, {a[0].event_id: a[1] for a in linked}

    def _choose(
        self,
        p: Plan,
        vecs: np.ndarray,
        anchor: int,
        found: tuple[list[tuple[Message, str]], dict],
        avecs: np.ndarray,
        queries: np.ndarray,
        evidence: Evidence = NO_EVIDENCE,
        quoted: Collection[str] = (),
    ) -> Hit:
        """The hit of a planned window: its matched question (the anchor), the responses
        it quotes and the answers it carries; a line in `quoted` (a hit above quotes it)
        is carried and cited, not quoted (QUOTED_ONCE)."""
        answers, linked = found
        window = p.window
        question = window[anchor]
        follow_ups = _follow_ups(p, anchor, linked) if FOLLOW_UPS else []
        quoted_above = quoted if QUOTED_ONCE else ()
        follow_ups = [m for m in follow_ups if m.event_id not in quoted_above]
        # Responses: the window's later lines that respond to the asker, and the
        # linked answers from other windows; each must speak to the query or the
        # matched question (ANSWER_FLOOR; RESPONSE_FLOOR inside the window, where the
        # chunker already put it in the question's conversation), or it is neither
        # carried nor quoted.
        cands = [
            (m, "", vecs[i]) for i, m in enumerate(window) if i > anchor and m.event_id in linked
        ]
        cands += [(m, rule, avecs[j]) for j, (m, rule) in enumerate(answers)]
        cands += [(window[i], "", vecs[i]) for i in lines.said_before(window, anchor)]
        asked = set(evidence.weights) | set(tokens(question.body))
        # The matched line answers someone who asked (ANSWERS_ONE): of the responses
        # from later chat, only theirs (and Matrix replies to it) are quoted.
        partners = _answered_askers(window, anchor) if ANSWERS_ONE else frozenset()
        thanked = lines.thanked(question.sender, p.later) if THANKED else set()
        scored, carried = [], set()
        lone: tuple[Message, str] | None = None  # the next speaker, below the floor
        praised: list[tuple[Message, str]] = []  # thanked, below the floor
        as_asked = self._as_question(vecs[anchor], question.body)
        for m, rule, v in cands:
            if m.event_id in quoted_above:
                if rule:
                    carried.add(m.event_id)
                continue
            to_query, to_question = float((v @ queries.T).max()), float(v @ as_asked)
            close = max(to_query, to_question)
            if close < (ANSWER_FLOOR if rule else RESPONSE_FLOOR):
                if rule and m.event_id in thanked:  # carried and cited, not quoted
                    carried.add(m.event_id)
                    if THANKED_QUOTED:
                        praised.append((m, rule))
                continue
            below = (
                linked.get(m.event_id) in IMPLICIT
                and m.event_id not in thanked
                and close < IMPLICIT_FLOOR
            )
            if below:  # carried and cited (it may be the answer), not quoted
                if rule:
                    carried.add(m.event_id)
                if not (NEXT_ALONE and rule == "next" and lone is None):
                    continue
            if not _quotable(m, rule, linked, thanked, partners, question, p.later):
                carried.add(m.event_id)  # carried and cited, not quoted
                continue
            if below:  # the next speaker from later chat: quoted if nothing else is
                lone = (m, rule)
                continue
            scored.append(
                (
                    m,
                    rule,
                    (to_query + to_question)
                    * lines.novelty(m.body, asked)
                    * lines.asks_back(m.body),
                )
            )
        answers = [(m, rule) for m, rule, _ in scored if rule]
        answers += [(m, rule) for m, rule, _ in cands if m.event_id in carried]
        top = _best_responses(
            scored, question, asked, linked, thanked, window, self.shown_lines - 1
        )
        picked = [(scored[i][0], scored[i][1]) for i in top]
        # The asker's own follow-ups that answer back ("once they fix it, it should
        # recover"): quoted where a response leaves room, before any other line.
        picked += [
            (m, "")
            for m in follow_ups
            if lines.says_something(m) and all(m.event_id != x.event_id for x, _ in picked)
        ][: max(0, self.shown_lines - 1 - len(picked))]
        if not picked and lone is not None:
            picked = [lone]
        picked += praised[: max(0, self.shown_lines - 1 - len(picked))]
        if len(picked) < self.shown_lines - 1 and PAD_WITH_WINDOW:  # the window's lines
            sims = (vecs @ queries.T).max(axis=1)  # that speak to the query, if any
            others = sorted(
                (
                    i
                    for i in range(len(window))
                    if i != anchor
                    and sims[i] >= LINE_FLOOR
                    and lines.says_something(window[i])
                    and all(window[i].event_id != m.event_id for m, _ in picked)
                ),
                key=lambda i: (-sims[i], i),
            )
            picked += [(window[i], "") for i in others[: self.shown_lines - 1 - len(picked)]]
        shown = sorted([(question, "")] + picked, key=lambda ml: (ml[0].ts, ml[0].event_id))
        return replace(
            p.hit,
            text=document(Window(WindowID(""), window[0].room_id, tuple(window))),
            event_ids=tuple(m.event_id for m in window),
            senders=tuple(dict.fromkeys(m.sender for m in window)),
            ts_first=window[0].ts,
            ts_last=window[-1].ts,
            answers=tuple(_line(m, rule) for m, rule in answers),
            shown=tuple(_line(m, rule) for m, rule in shown),
            lines=tuple(_line(m, "") for m in window),
        )

    def _as_question(self, vec: np.ndarray, text: str) -> np.ndarray:
        """The matched question's line vector on the scale a response is compared with a
        query on: itself, but for a pair of models (pair_embedder.py), where two lines'
        plain dot product would mix both models evenly whatever their language."""
        if not isinstance(self.embedder, QueryProjector):
            return vec
        return np.asarray(self.embedder.passage_as_query(vec, text), dtype=np.float32)

    def _vectors(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of the texts, from the cache or the model, each text encoded on
        its own: the int8 model quantises a call's activations together, so a line's
        vector moved with the lines beside it in the call (cosine down to 0.96 on the
        Ubuntu chat), and a warm cache then ranked lines otherwise than a fresh process.
        One by one, the API, the CLI and `!sources` agree, at no measured cost (a
        cold-cache search of an Ubuntu dev question: 488 ms median, 508 batched); the
        ONNX embedder runs them on both cores (onnx_embedder.EACH_THREADS)."""
        keys = [
            hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            for t in texts
        ]
        found = {k: self._cache[k] for k in keys if k in self._cache}
        todo = list(dict.fromkeys(k for k in keys if k not in found))
        if todo:
            text_of = dict(zip(keys, texts))
            for k, v in zip(todo, encode_each(self.embedder, [text_of[k] for k in todo])):
                found[k] = np.asarray(v, dtype=np.float32)
        for k, v in found.items():
            self._cache[k] = v
            self._cache.move_to_end(k)
        while len(self._cache) > CACHE_LINES:
            self._cache.popitem(last=False)
        if not keys:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys])


def _quotable(
    m: Message,
    rule: str,
    linked: dict,
    thanked: set[EventID],
    partners: frozenset[str],
    question: Message,
    later: list[Message],
) -> bool:
    """Whether a response that speaks to the question may be quoted; else it is carried
    and cited only: another's line when the matched line answers someone (ANSWERS_ONE),
    a line to what the asker told them since (linkage.ASKER_TURNED), a thanks linked by
    its place (RESPONDER_THANKS), someone's own new question (PLACE_ASKS_OWN)."""
    if rule not in ("", "reply", "thread") and partners and not names(m.sender) & partners:
        return False
    if rule == "aside":
        return False
    if (
        RESPONDER_THANKS
        and linked.get(m.event_id) in IMPLICIT
        and m.sender != question.sender
        and lines.thanks(m.body)
        and "?" not in m.body
    ):
        return False
    return not (PLACE_ASKS_OWN and _asks_own(m, linked, thanked, question, later))


def _best_responses(
    scored: list[tuple[Message, str, float]],
    question: Message,
    asked: set[str],
    linked: dict,
    thanked: set[EventID],
    window: list[Message],
    n: int,
) -> list[int]:
    """Which of the scored responses to quote (at most n, best first): those that say
    something, not superseded by their sender's later line, the direct answer, then by
    score; a line linked by its place only beside an answer's, or far below the best
    (CLOSE_TO_BEST), is left out."""
    later_said = lines.said_after(
        [m for m, _, _ in scored], [sc for _, _, sc in scored], SUPERSEDE_RATIO
    )
    direct = -1  # the first response, when it answers a yes/no question yes or no
    if DIRECT and lines.asks_yes_no(question.body):
        first = min(
            (i for i, (m, _, _) in enumerate(scored) if m.ts > question.ts),
            key=lambda i: scored[i][0].ts,
            default=-1,
        )
        if first >= 0 and lines.says_yes_no(scored[first][0].body):
            direct = first
    ranked = sorted(
        range(len(scored)),
        key=lambda i: (
            not lines.says_something(scored[i][0], asked),
            SUPERSEDED and scored[i][0].event_id in later_said,
            i != direct,
            -scored[i][2],
            i,
        ),
    )
    top = ranked[:n]
    if PLACE_NOT_BESIDE and top:  # by place beside an answer: a new topic, mostly
        by_place = [_by_place(scored[i][0], linked, thanked, window) for i in top]
        best_answers = not by_place[0] and lines.asks_back(scored[top[0]][0].body) == 1.0
        top = top[:1] + [i for i, b in zip(top[1:], by_place[1:]) if not (b and best_answers)]
    if CLOSE_TO_BEST is not None and top:  # the best response, and those near it
        best = scored[top[0]][2]
        top = top[:1] + [i for i in top[1:] if scored[i][2] >= CLOSE_TO_BEST * best]
    return top


def _once(
    answers: list[tuple[list[tuple[Message, str]], dict]],
    questions: list[np.ndarray | None],
    answer_vecs: np.ndarray,
    asked: list[Message | None],
) -> list[tuple[list[tuple[Message, str]], dict]]:
    """Each linked answer under one hit only (an answer addressed to a person links to
    all their questions; one line must not land under every one of them). ONCE_BY:
    "rank", the first hit carrying it (the hits are ranked by what answers the query,
    and the first is what a person reads: Gitter dev success@1 0.739 -> 0.769 against
    the two below); "meaning", the hit whose matched question it is nearest to, then
    in time; "time", the question it came soonest after."""
    owner: dict[EventID, tuple] = {}
    at = 0
    for i, ((found, _), q, question) in enumerate(zip(answers, questions, asked)):
        for m, _ in found:
            v = answer_vecs[at]
            at += 1
            if q is None or question is None:
                continue
            if ONCE_BY == "rank":
                key: tuple = (i,)
            elif ONCE_BY == "time":
                key = (m.ts - question.ts, i)
            else:
                key = (-round(float(v @ q), 3), m.ts - question.ts, i)
            owner[m.event_id] = min(owner.get(m.event_id, key), key)  # key ends in i
    return [
        ([a for a in found if owner[a[0].event_id][-1] == i], ids)
        for i, (found, ids) in enumerate(answers)
    ]


def _follow_ups(p: Plan, anchor: int, linked: dict) -> list[Message]:
    """The asker's lines after the matched question that go on with it: said before
    anyone else spoke, or a reply to (or a pill of) one who responded."""
    q = p.window[anchor]
    linked = {e: r for e, r in linked.items() if r not in IMPLICIT}  # who surely responded
    responders = {m.sender for m in p.later if m.event_id in linked}
    out, alone = [], True
    for m in p.later:
        if m.ts < q.ts or m.event_id == q.event_id:
            continue
        if m.sender != q.sender:
            alone = False
        elif m.reply_to in linked or bool(set(m.mentions) & responders):
            out.append(m)
        elif alone and not (ASIDES and _aside(m, q, responders, p.later)):
            out.append(m)
    return out


def _aside(m: Message, q: Message, responders: set[UserID], later: list[Message]) -> bool:
    """The asker's line m turns to someone her question q did not address and who did
    not respond (ASIDES). Asked only of her lines before anyone else spoke: few."""
    known = speakers(later)
    to = addressees(m, known)
    return bool(to) and not to & (addressees(q, known) | {n for u in responders for n in names(u)})


def _answered_askers(window: Sequence[Message], anchor: int) -> frozenset[str]:
    """When the matched line answers someone: the names of those it speaks to (its
    text's address, its pills) who spoke before it in the window and never to its
    sender (they asked; it answers them). Empty when it answers no one, only people
    who had been talking to its sender, or thanks them (then its sender is the one who
    asked)."""
    m = window[anchor]
    if lines.thanks(m.body):  # a thanks is the asker's: others may go on answering
        return frozenset()
    mine = names(m.sender)
    known = speakers(window)
    to = set(addressees(m, known)) | {n for u in m.mentions if u != m.sender for n in names(u)}
    to -= mine
    spoke: set[str] = set()
    helped: set[str] = set()  # spoke to the sender before: the sender asked them
    for x in window[:anchor]:
        theirs = names(x.sender) & to
        if theirs:
            spoke |= theirs
            if addressees(x, known) & mine or m.sender in x.mentions:
                helped |= theirs
    return frozenset(spoke - helped)


def _by_place(m: Message, linked: dict, thanked: set[EventID], window: list[Message]) -> bool:
    """A response linked only by its place, from outside the window, and not thanked."""
    return (
        linked.get(m.event_id) in IMPLICIT
        and m.event_id not in thanked
        and all(m.event_id != w.event_id for w in window)
    )


def _asks_own(
    m: Message, linked: dict, thanked: set[EventID], question: Message, later: list[Message]
) -> bool:
    """A line linked only by its place, from another than the matched line's sender,
    that asks a question of its own and names, pills and replies to no one."""
    if (
        linked.get(m.event_id) not in IMPLICIT
        or m.event_id in thanked
        or m.sender == question.sender
        or lines.asks_back(m.body) == 1.0
        or m.mentions
        or m.reply_to is not None
    ):
        return False
    known = speakers(later)  # rarely reached
    return not addressees(m, known)


def _matched_line(c: _Candidate) -> Message | None:
    """The candidate's matched question (None for a reference hit)."""
    return c.found[0][c.found[2]] if c.found else None


def _matched(c: _Candidate) -> str | None:
    m = _matched_line(c)
    return m.body if m else None


def _again(c: _Candidate, covered: set[str], words: Evidence | None) -> bool:
    """Whether the candidate is a conversation a hit above already shows
    (ONE_CONVERSATION): its matched line is quoted or carried there, its question's
    window and its answer's hours apart. For search-box `words`, only when every line
    of its window holding one of them is too: the vectors may have matched another line
    than the one with the word."""
    m = _matched_line(c)
    if m is None or m.event_id not in covered:
        return False
    if words is None:
        return True
    assert c.found is not None
    return all(x.event_id in covered for x in c.found[0] if words.share([x.body]))


def _unquoted_anchor(
    window: Sequence[Message],
    vecs: np.ndarray,
    queries: np.ndarray,
    words: Evidence,
    quoted: Collection[str],
    anchor: int,
) -> int:
    """Of the window's lines holding one of the search-box words and not quoted by a hit
    above, the closest to the query; `anchor` when there is none."""
    sims = (vecs @ queries.T).max(axis=1)
    free = [i for i, m in enumerate(window) if m.event_id not in quoted and words.share([m.body])]
    return max(free, key=lambda i: (sims[i], -i)) if free else anchor


def _starts(lower: _Candidate, linked: dict, upper: _Candidate) -> bool:
    """Whether the lower candidate asks the question the upper one's conversation goes
    on with (FROM_QUESTION): its matched line came first, its responses include the
    upper's matched line, and its asker speaks in the upper's window."""
    q, m = _matched_line(lower), _matched_line(upper)
    if q is None or m is None or q.ts >= m.ts or m.event_id not in linked:
        return False
    if "?" not in q.body and lines.asks_back(q.body) == 1.0:  # no question
        return False
    assert upper.found is not None
    return any(x.sender == q.sender for x in upper.found[0])


def _from_question(lower: Hit, upper: Hit, linked: dict) -> Hit:
    """The lower hit, carrying the upper hit's quoted and carried lines too, at the
    upper's place and similarity."""
    have = set(lower.cited_event_ids)
    more = {
        x.event_id: replace(x, linked=linked.get(x.event_id) or x.linked or "conversation")
        for x in (*upper.shown, *upper.answers)
        if x.event_id not in have
    }
    return replace(
        lower,
        answers=tuple(sorted((*lower.answers, *more.values()), key=lambda x: (x.ts, x.event_id))),
        similarity=upper.similarity,
    )


def _line(m: Message, linked: str) -> Line:
    return Line(m.event_id, m.sender, m.ts, m.body, linked)
