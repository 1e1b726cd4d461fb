"""Rendering hits as a Matrix reply: plain `body` and HTML `formatted_body`.

Every piece of user text (message lines, senders, room names) is HTML-escaped; links
are built from percent-encoded ids only. Long replies are cut at a whole hit.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from urllib.parse import quote

from matrix_sources.indexer.clock import format_ts
from matrix_sources.indexer.derived.filter import EmittedSection
from matrix_sources.indexer.records import CORPUS_REFERENCE, Hit, Line, UserID
from matrix_sources.indexer.search import abstain
from matrix_sources.indexer.search.abstain import QueryFloor
from matrix_sources.indexer.search.lexical import terms

MAX_LINES_PER_HIT = 3
MAX_LINE_CHARS = 220
MAX_REPLY_CHARS = 12000  # well inside Matrix's 64 KiB event limit, HTML included


@dataclass(frozen=True)
class Reply:
    body: str
    formatted_body: str
    quoted: tuple[str, ...]  # the message lines the reply shows, for the artifact manifest
    # One per hit shown: its header and quoted lines, recorded as answer artifacts once
    # the reply is sent (DESIGN.md "Derived filter").
    sections: tuple[EmittedSection, ...] = ()
    hits: tuple[Hit, ...] = ()  # the hits shown, one per section

    def content(self, in_reply_to: str | None = None, thread_root: str | None = None) -> dict:
        # An empty m.mentions: the reply pings nobody by design (the quoted senders, the
        # asker), not only because a notice happens not to.
        content: dict = {
            "msgtype": "m.notice",
            "body": self.body,
            "format": "org.matrix.custom.html",
            "formatted_body": self.formatted_body,
            "m.mentions": {},
        }
        if thread_root:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread_root,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": in_reply_to or thread_root},
            }
        elif in_reply_to:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": in_reply_to}}
        return content


def server_of(mxid: str) -> str | None:
    _, sep, server = mxid.partition(":")
    return server if sep and server else None


def via_servers(hit: Hit, fallback: str | None = None) -> list[str]:
    servers = [server_of(hit.room_id)] + [server_of(s) for s in hit.senders] + [fallback]
    return [s for s in dict.fromkeys(servers) if s][:3]


def permalink(room_id: str, event_id: str, via: list[str]) -> str:
    link = f"https://matrix.to/#/{quote(room_id, safe='')}/{quote(event_id, safe='')}"
    if via:
        link += "?" + "&".join(f"via={quote(s, safe='')}" for s in via)
    return link


def _clip(text: str, n: int = MAX_LINE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def shown_lines(hit: Hit, n: int = MAX_LINES_PER_HIT) -> tuple[Line, ...]:
    """The lines to quote: the presenter's choice (indexer/search/present.py, by meaning), or,
    for a hit that was not presented, the window's first lines."""
    if hit.shown:
        return hit.shown
    lines = hit.lines
    if not lines and hit.corpus == CORPUS_REFERENCE:  # a chunk's text is its lines
        lines = tuple(
            Line(hit.first_event_id, UserID(""), hit.ts_first, text)
            for text in hit.text.split("\n")
        )
    return tuple(line for line in lines if line.body.strip())[:n]


def _later(hit: Hit, line: Line) -> str:
    """How long after the hit's window a linked answer came: " · 3 h later"."""
    if not line.linked:
        return ""
    minutes = max(0, (line.ts - hit.ts_last) // 60_000)
    if minutes < 1:
        return ""
    if minutes < 60:
        return f" · {minutes} min later"
    hours = minutes // 60
    return f" · {hours} h later" if hours < 48 else f" · {hours // 24} days later"


def _time_range(hit: Hit) -> str:
    """When the hit was said, in UTC (said so: readers are in every zone)."""
    a, b = format_ts(hit.ts_first), format_ts(hit.ts_last)
    if a == b:
        return f"{a} UTC"
    return f"{a}–{b[11:]} UTC" if a[:10] == b[:10] else f"{a} – {b} UTC"


def _localpart(mxid: str) -> str:
    """A sender's name as the reply shows it: control characters (a newline stored by
    an older release) dropped, so no id can forge a line of the reply."""
    local = mxid[1:].split(":", 1)[0] if mxid.startswith("@") else mxid
    return "".join(c for c in local if c.isprintable())


# How to ask why: in the room, the bot's command; in a shell, the CLI's (cli/search.py).
WHY_IN_ROOM = "`!sources why 1`"
NOTHING_MATCHES = (
    "Nothing in the index answers that. Try asking it another way, or "
    "narrow it to a room with --room #room:server. "
    f"{WHY_IN_ROOM} shows the closest message and how far off it was."
)
NOTHING_IN_ROOM = (
    "Nothing in that room answers that. Try asking it another way, or "
    "without --room to search every room. "
    f"{WHY_IN_ROOM} shows the closest message and how far off it was."
)


def nothing_matches(room: bool = False, pending: int = 0, why: str = WHY_IN_ROOM) -> str:
    """The reply when no hit clears the floor: it says what was searched, and that
    messages are still being indexed when they are (they may hold the answer). `why`:
    how the asker asks for the closest one where they are (a shell has no `!sources`)."""
    text = (NOTHING_IN_ROOM if room else NOTHING_MATCHES).replace(WHY_IN_ROOM, why)
    if pending:
        text = (
            f"{pending} message{_s(pending)} {'is' if pending == 1 else 'are'} still "
            f"being indexed, so the answer may not be searchable yet: ask again in a "
            f"minute. {text}"
        )
    return text


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def render_hits(
    hits: list[Hit],
    query_texts: tuple[str, ...],
    fallback_server: str | None = None,
    header: str | None = None,
    room: bool = False,
    pending: int = 0,
    note: str = "",
    nothing_note: str = "",
    why: str = WHY_IN_ROOM,
) -> Reply:
    """`room`: the query was narrowed to a room; `pending`: messages not indexed yet;
    `note`: said after the "Sources for" line (an edited reply says why); `nothing_note`:
    added to "nothing matches" (a question the model does not read: language.py); `why`:
    how to ask why where the reply is read."""
    if not hits:
        text = nothing_matches(room, pending, why) + (f" {nothing_note}" if nothing_note else "")
        return Reply(text, html.escape(text), ())
    if header is not None:
        plain, rich = [header], [f"<p>{html.escape(header)}</p><ol>"]
    else:
        more = f" (+{len(query_texts) - 1} more)" if len(query_texts) > 1 else ""
        more += f" ({note})" if note else ""
        plain = [f"Sources for: {_clip(query_texts[0], 120)}{more}"]
        rich = [
            f"<p>Sources for: <em>{html.escape(_clip(query_texts[0], 120))}</em>"
            f"{html.escape(more)}</p><ol>"
        ]
    quoted: list[str] = []
    size = len(plain[0]) + len(rich[0]) + len("</ol>")
    # Room kept for the note that says how many hits were cut (it replaces "</ol>").
    reserve = 1 + 2 * len(_cut_note(len(hits))) + len("<p></p>")
    sections: list[EmittedSection] = []
    for n, hit in enumerate(hits, start=1):
        if hit.corpus == CORPUS_REFERENCE:
            piece_plain, r, shown, section = _reference_piece(n, hit, query_texts)
        else:
            piece_plain, r, shown, section = _chat_piece(n, hit, query_texts, fallback_server)
        added = 1 + len(piece_plain) + len(r)  # 1: the newline joining it to the body
        if size + added + (reserve if n < len(hits) else 0) > MAX_REPLY_CHARS and n > 1:
            more = _cut_note(len(hits) - n + 1)
            plain.append(more)
            rich.append(f"</ol><p>{html.escape(more)}</p>")
            break
        plain.append(piece_plain)
        rich.append(r)
        quoted.extend(shown)
        sections.append(section)
        size += added
    else:
        rich.append("</ol>")
    return Reply(
        "\n".join(plain),
        "".join(rich),
        tuple(quoted),
        tuple(sections),
        tuple(hits[: len(sections)]),
    )


def _title(topic: str) -> str:
    """The room's topic over its link (hovered in clients), clipped to one line."""
    if not topic:
        return ""
    one = " ".join(topic.split())
    one = one if len(one) <= 200 else one[:199] + "…"
    return f' title="{html.escape(one, quote=True)}"'


def _chat_piece(
    n: int, hit: Hit, query_texts: tuple[str, ...], fallback_server: str | None
) -> tuple[str, str, list[str], EmittedSection]:
    """A chat hit: room, time, senders, the quoted lines (the matched question and the
    answers to it, linked answers from later windows marked with how much later), each
    linked to its event."""
    room = hit.room_label or hit.room_id
    speakers = list(dict.fromkeys([*hit.senders, *(a.sender for a in hit.answers)]))
    senders = ", ".join(_localpart(s) for s in speakers[:4])
    if len(speakers) > 4:
        senders += f" +{len(speakers) - 4}"
    via = via_servers(hit, fallback_server)
    link = permalink(hit.room_id, hit.first_event_id, via)
    shown = shown_lines(hit)
    lines = [
        (permalink(hit.room_id, ln.event_id, via), _localpart(ln.sender) + _later(hit, ln), ln.body)
        for ln in shown
    ]
    head = f"{room} · {_time_range(hit)} · {senders}"
    p = [f"{n}. {head}"]
    # The plain body stays readable: each line's own link is in the HTML, the window's
    # below (a matrix.to link is ~130 characters).
    p += [f"   > {who}: {_clip(b)}" for url, who, b in lines]
    p.append(f"   window: {link}")
    r = (
        f'<li><a href="{html.escape(link, quote=True)}"{_title(hit.room_topic)}>'
        f"{html.escape(room)}</a>"
        f" · {html.escape(_time_range(hit))} · {html.escape(senders)}<blockquote>"
        + "<br>".join(
            f'<a href="{html.escape(url, quote=True)}">'
            f"<b>{html.escape(who)}</b></a>: {html.escape(_clip(b))}"
            for url, who, b in lines
        )
        + "</blockquote></li>"
    )
    quoted = [_clip(b) for _, _, b in lines]
    text = "\n".join([head] + [f"{who}: {_clip(b)}" for _, who, b in lines])
    return (
        "\n".join(p),
        r,
        quoted,
        EmittedSection(text, hit.cited_event_ids, tuple(ln.event_id for ln in shown)),
    )


def reference_lines(
    hit: Hit, query_texts: tuple[str, ...], n: int = MAX_LINES_PER_HIT
) -> list[str]:
    """The lines of a reference chunk sharing most search terms with the query (stop
    words never count), in order."""
    qwords = {w for t in query_texts for w in terms(t)}
    lines = [
        line.strip()
        for line in hit.text.split("\n")
        if line.strip() and not line.lstrip().startswith(("```", "~~~"))
    ]
    scored = sorted(
        ((len(qwords & set(terms(line))), -i, i) for i, line in enumerate(lines)), reverse=True
    )[:n]
    return [lines[i] for i in sorted(i for _, _, i in scored)]


def _reference_piece(
    n: int, hit: Hit, query_texts: tuple[str, ...]
) -> tuple[str, str, list[str], EmittedSection]:
    """A reference hit: cited by file and heading (no room, time or senders)."""
    ref = hit.ref
    file = ref.file if ref else hit.room_label
    heading = ref.heading if ref else ""
    corpus = f" · reference {ref.corpus_name}" if ref else " · reference"
    lines = [_clip(line) for line in reference_lines(hit, query_texts)]
    head = f"{file} › {heading}" if heading else file
    p = [f"{n}. {head}{corpus}"] + [f"   > {line}" for line in lines]
    r = (
        f"<li><b>{html.escape(file)}</b>"
        + (f" › {html.escape(heading)}" if heading else "")
        + html.escape(corpus)
        + "<blockquote>"
        + "<br>".join(f"<code>{html.escape(line)}</code>" for line in lines)
        + "</blockquote></li>"
    )
    return "\n".join(p), r, lines, EmittedSection("\n".join([head] + lines))


def _cut_note(n: int) -> str:
    return f"({n} more hit{_s(n)} cut to keep this reply short)"


def render_notice(message: str) -> Reply:
    """A sentence or two of plain text (a refusal, a confirmation)."""
    return Reply(message, html.escape(message).replace("\n", "<br>"), ())


render_error = render_notice


def render_help(text: str) -> Reply:
    return Reply(text, "<pre>" + html.escape(text) + "</pre>", ())


def render_why(
    n: int, hit: Hit, texts: tuple[str, ...], rrf_k: int, floor: QueryFloor | None = None
) -> Reply:
    """Why hit n ranked where it did: its rank and similarity under each query text,
    and how reciprocal rank fusion added them up. With `floor`, the hit is the closest
    one of a query that got "nothing matches": say which floor it was below."""
    room = hit.room_label or hit.room_id
    head = f"Hit {n}: {room} · {_time_range(hit)}, fused score {hit.score:.4f}"
    score = "unknown" if hit.similarity is None else f"{hit.similarity:.3f}"
    if floor is None:
        head += (
            f"; its score {score} (half the window's cosine similarity to the "
            "question, half its closest line's)"
        )
    if floor is not None:
        sim = score
        f = floor.floor
        margin_key = (
            "search.no_shared_word_margin"
            if floor.margin == f.no_shared_word_margin
            else "its script's search.no_shared_word_margin_by_script"
        )
        numeric = f.min_similarity + (0.0 if floor.shares_word(hit.bodies) else floor.margin)
        rule = (
            f"the floor search.min_similarity = {f.min_similarity:.2f}"
            if floor.shares_word(hit.bodies) or not floor.margin
            else f"the floor {numeric:.2f} for a hit sharing no word with the "
            f"question (search.min_similarity {f.min_similarity:.2f} + "
            f"{margin_key} {floor.margin:.2f})"
        )
        head = (
            f"Nothing matched; the closest was {room} · {_time_range(hit)}: its "
            f"score {sim} (half the window's cosine similarity to the question, half "
            f"its closest line's) is below {rule}, so it was not shown. "
            f"Fused score {hit.score:.4f}"
        )
        alone = floor.needed_alone(hit.bodies)
        carried = (*hit.bodies, *(a.body for a in hit.answers))  # as the presenter reads
        first = floor.needed_first(carried)
        lone = len(hit.shown) <= 1
        if numeric < first < math.inf and (hit.similarity or -1.0) >= numeric and not lone:
            held = floor.evidence.words_held(carried)
            head = (
                f"Nothing matched; the closest was {room} · {_time_range(hit)}: it holds "
                f"{held} of the question's {len(floor.evidence.weights)} words, and a reply "
                f"is given only when one hit holds {abstain.WORDS_ENOUGH} of them or "
                f"reaches {first:.2f}, as one sharing no word does (search.min_similarity "
                f"{f.min_similarity:.2f} + {margin_key} {floor.margin:.2f}); its score "
                f"{sim} (half the window's cosine similarity to the question, half its "
                f"closest line's) is below, so nothing was shown. Fused score {hit.score:.4f}"
            )
        if numeric < alone < math.inf and (hit.similarity or -1.0) >= numeric and lone:
            head = (
                f"Nothing matched; the closest was {room} · {_time_range(hit)}: a single "
                f"line that nothing answered, and a hit quoting one line must reach "
                f"{alone:.2f}, as one sharing no word with the question does "
                f"(search.min_similarity {f.min_similarity:.2f} + {margin_key} "
                f"{floor.margin:.2f}); its score {sim} (half the window's cosine "
                "similarity to the question, half its closest line's) is below, so it "
                f"was not shown. Fused score {hit.score:.4f}"
            )
        if floor.other_language is not None and (
            floor.in_same_language(hit.bodies) or (hit.similarity or -1.0) >= numeric
        ):
            head = (
                f"Nothing matched; the closest was {room} · {_time_range(hit)}: the "
                "question does not read as English, and this hit is in another language "
                "too (the window or its line closest to the question) or shares no word "
                "with it. To the English-only model such a pair is alike by its language, "
                "not by what it says, so only a window holding the question's words is "
                f"shown (its score {sim}; docs/multilingual.md). Fused score {hit.score:.4f}"
            )
    parts, terms = [], []
    for i, text in enumerate(texts):
        r = hit.ranks[i] if i < len(hit.ranks) else None
        label = f"text {i + 1} “{_clip(text, 60)}”" if len(texts) > 1 else f"“{_clip(text, 60)}”"
        if r is None:
            parts.append(f"{label}: not in its top results (adds 0)")
        else:
            rank, cosine = r
            parts.append(f"{label}: rank {rank}, the window's cosine similarity {cosine:.3f}")
            terms.append(f"1/({rrf_k}+{rank})")
    # The rest of the score, if any, came from the keyword (lexical) leg of the search.
    lexical = hit.score - sum(1 / (rrf_k + r[0]) for r in hit.ranks if r is not None)
    if lexical > 1e-9:
        parts.append(f"keyword match (BM25 leg): adds {lexical:.4f}")
        terms.append(f"{lexical:.4f}")
    formula = (" + ".join(terms) + f" = {hit.score:.4f}") if terms else ""
    plain = [head] + [f"  {p}" for p in parts]
    if formula:
        plain.append(f"  score = {formula}")
    rich = (
        f"<p>{html.escape(head)}</p><ul>"
        + "".join(f"<li>{html.escape(p)}</li>" for p in parts)
        + "</ul>"
        + (f"<p>score = <code>{html.escape(formula)}</code></p>" if formula else "")
    )
    return Reply("\n".join(plain), rich, ())
