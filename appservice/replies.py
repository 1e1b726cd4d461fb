"""Rendering hits as a Matrix reply: plain `body` and HTML `formatted_body`.

Every piece of user text (message lines, senders, room names) is HTML-escaped; links
are built from percent-encoded ids only. Long replies are cut at a whole hit.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from urllib.parse import quote

from indexer.chunker import format_ts, parse_document
from indexer.derived import EmittedSection
from indexer.records import CORPUS_REFERENCE, Hit

MAX_LINES_PER_HIT = 2
MAX_LINE_CHARS = 220
MAX_REPLY_CHARS = 12000  # well inside Matrix's 64 KiB event limit, HTML included
_WORD = re.compile(r"\w+", re.UNICODE)


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
        content: dict = {"msgtype": "m.notice", "body": self.body,
                         "format": "org.matrix.custom.html",
                         "formatted_body": self.formatted_body, "m.mentions": {}}
        if thread_root:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread_root,
                                       "is_falling_back": True,
                                       "m.in_reply_to": {"event_id": in_reply_to or thread_root}}
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


def best_lines(hit: Hit, query_texts: tuple[str, ...], n: int = MAX_LINES_PER_HIT
               ) -> list[tuple[str, str, str]]:
    """The window's messages that share most words with the query, in window order,
    as (event id, sender, body)."""
    qwords = {w for t in query_texts for w in _WORD.findall(t.lower())}
    entries = parse_document(hit.text)
    lines = [(hit.event_ids[i] if i < len(hit.event_ids) else hit.first_event_id, sender, body)
             for i, (_, sender, body) in enumerate(entries) if body.strip()]
    scored = [(len(qwords & set(_WORD.findall(body.lower()))), -i, i)
              for i, (_, _, body) in enumerate(lines)]
    keep = sorted(i for _, _, i in sorted(scored, reverse=True)[:n])
    return [lines[i] for i in keep]


def _time_range(hit: Hit) -> str:
    a, b = format_ts(hit.ts_first), format_ts(hit.ts_last)
    if a == b:
        return a
    return f"{a}–{b[11:]}" if a[:10] == b[:10] else f"{a} – {b}"


def _localpart(mxid: str) -> str:
    return mxid[1:].split(":", 1)[0] if mxid.startswith("@") else mxid


def render_hits(hits: list[Hit], query_texts: tuple[str, ...], fallback_server: str | None = None,
                header: str | None = None) -> Reply:
    if not hits:
        msg = "No indexed conversation matches that yet."
        return Reply(msg, html.escape(msg), ())
    if header is not None:
        plain, rich = [header], [f"<p>{html.escape(header)}</p><ol>"]
    else:
        more = f" (+{len(query_texts) - 1} more)" if len(query_texts) > 1 else ""
        plain = [f"Sources for: {_clip(query_texts[0], 120)}{more}"]
        rich = [f"<p>Sources for: <em>{html.escape(_clip(query_texts[0], 120))}</em>{more}"
                "</p><ol>"]
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
    return Reply("\n".join(plain), "".join(rich), tuple(quoted), tuple(sections),
                 tuple(hits[:len(sections)]))


def _chat_piece(n: int, hit: Hit, query_texts: tuple[str, ...], fallback_server: str | None
                ) -> tuple[str, str, list[str], EmittedSection]:
    """A chat hit: room, time, senders, lines linked to their events."""
    room = hit.room_label or hit.room_id
    senders = ", ".join(_localpart(s) for s in hit.senders[:4])
    if len(hit.senders) > 4:
        senders += f" +{len(hit.senders) - 4}"
    via = via_servers(hit, fallback_server)
    link = permalink(hit.room_id, hit.first_event_id, via)
    best = best_lines(hit, query_texts)
    lines = [(permalink(hit.room_id, e, via), s, b) for e, s, b in best]
    head = f"{room} · {_time_range(hit)} · {senders}"
    p = [f"{n}. {head}"]
    p += [f"   > {_localpart(s)}: {_clip(b)}\n     {url}" for url, s, b in lines]
    p.append(f"   window: {link}")
    r = (f"<li><a href=\"{html.escape(link, quote=True)}\">{html.escape(room)}</a>"
         f" · {html.escape(_time_range(hit))} · {html.escape(senders)}<blockquote>"
         + "<br>".join(f"<a href=\"{html.escape(url, quote=True)}\">"
                       f"<b>{html.escape(_localpart(s))}</b></a>: {html.escape(_clip(b))}"
                       for url, s, b in lines)
         + "</blockquote></li>")
    shown = [_clip(b) for _, _, b in lines]
    text = "\n".join([head] + [f"{_localpart(s)}: {_clip(b)}" for _, s, b in lines])
    return "\n".join(p), r, shown, EmittedSection(text, tuple(hit.event_ids),
                                                  tuple(e for e, _, _ in best))


def reference_lines(hit: Hit, query_texts: tuple[str, ...], n: int = MAX_LINES_PER_HIT
                    ) -> list[str]:
    """The lines of a reference chunk sharing most words with the query, in order."""
    qwords = {w for t in query_texts for w in _WORD.findall(t.lower())}
    lines = [line.strip() for line in hit.text.split("\n")
             if line.strip() and not line.lstrip().startswith(("```", "~~~"))]
    scored = sorted(((len(qwords & set(_WORD.findall(line.lower()))), -i, i)
                     for i, line in enumerate(lines)), reverse=True)[:n]
    return [lines[i] for i in sorted(i for _, _, i in scored)]


def _reference_piece(n: int, hit: Hit, query_texts: tuple[str, ...]
                     ) -> tuple[str, str, list[str], EmittedSection]:
    """A reference hit: cited by file and heading (no room, time or senders)."""
    ref = hit.ref
    file = ref.file if ref else hit.room_label
    heading = ref.heading if ref else ""
    corpus = f" · reference {ref.corpus_name}" if ref else " · reference"
    lines = [_clip(line) for line in reference_lines(hit, query_texts)]
    head = f"{file} › {heading}" if heading else file
    p = [f"{n}. {head}{corpus}"] + [f"   > {line}" for line in lines]
    r = (f"<li><b>{html.escape(file)}</b>"
         + (f" › {html.escape(heading)}" if heading else "") + html.escape(corpus)
         + "<blockquote>" + "<br>".join(f"<code>{html.escape(line)}</code>" for line in lines)
         + "</blockquote></li>")
    return "\n".join(p), r, lines, EmittedSection("\n".join([head] + lines))


def _cut_note(n: int) -> str:
    return f"({n} more hits cut to keep this reply short)"


def render_error(message: str) -> Reply:
    return Reply(message, html.escape(message).replace("\n", "<br>"), ())


def render_help(text: str) -> Reply:
    return Reply(text, "<pre>" + html.escape(text) + "</pre>", ())


def render_why(n: int, hit: Hit, texts: tuple[str, ...], rrf_k: int) -> Reply:
    """Why hit n ranked where it did: its rank and similarity under each query text,
    and how reciprocal rank fusion added them up."""
    room = hit.room_label or hit.room_id
    head = f"Hit {n}: {room} · {_time_range(hit)}, fused score {hit.score:.4f}"
    parts, terms = [], []
    for i, text in enumerate(texts):
        r = hit.ranks[i] if i < len(hit.ranks) else None
        label = f"text {i + 1} “{_clip(text, 60)}”" if len(texts) > 1 else f"“{_clip(text, 60)}”"
        if r is None:
            parts.append(f"{label}: not in its top results (adds 0)")
        else:
            rank, sim = r
            parts.append(f"{label}: rank {rank}, cosine similarity {sim:.3f}")
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
    rich = (f"<p>{html.escape(head)}</p><ul>"
            + "".join(f"<li>{html.escape(p)}</li>" for p in parts) + "</ul>"
            + (f"<p>score = <code>{html.escape(formula)}</code></p>" if formula else ""))
    return Reply("\n".join(plain), rich, ())
