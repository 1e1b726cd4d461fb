"""The moderators' report as people read it: a notice (`!sources report`, the digest) or
the terminal (`matrix-sources report`). Built by indexer/moderation/report.py; here
only rendered: every question's text HTML-escaped, links from percent-encoded ids.

    Questions here, last 7 days (2024-05-01 09:00 to 2024-05-08 09:00 UTC)
    #help:example.org: 12 asked, 9 answered, 3 nothing matches; 👍 4 👎 1 ✅ 2
      nothing matched:
      2x how do I rotate the signing key
         https://matrix.to/#/!room/$ask1?via=example.org  https://matrix.to/#/...
"""

from __future__ import annotations

import html

from matrix_sources.indexer.clock import format_ts
from matrix_sources.indexer.moderation.report import Gap, Report, RoomReport

from .replies import MAX_REPLY_CHARS, Reply, permalink, render_error, server_of
from .status import ADMIN_POWER_LEVEL

UP, DOWN, SOLVED = "\N{THUMBS UP SIGN}", "\N{THUMBS DOWN SIGN}", "\N{WHITE HEAVY CHECK MARK}"
MAX_TEXT_CHARS = 200
# In a notice: at most this many entries a room and links an entry (the rest counted).
NOTICE_GAPS, NOTICE_LINKS = 15, 5


def _days(report: Report) -> str:
    days = (report.until_ms - report.since_ms) / 86_400_000
    return f"{days:g} day{'' if days == 1 else 's'}"


def _head(report: Report, what: str) -> str:
    return (
        f"{what}, last {_days(report)} ({format_ts(report.since_ms)} to "
        f"{format_ts(report.until_ms)} UTC)"
    )


def _figures(r: RoomReport) -> str:
    f = r.figures
    return (
        f"{f.asked} asked, {f.answered} answered, {f.nothing_matched} nothing matches; "
        f"{UP} {f.up} {DOWN} {f.down} {SOLVED} {f.solved}"
    )


def _name(r: RoomReport) -> str:
    return r.room_label or r.room_id


def _links(r: RoomReport, g: Gap, domain: str | None, most: int | None) -> list[str]:
    via = [s for s in dict.fromkeys([server_of(r.room_id), domain]) if s]
    ids = g.event_ids if most is None else g.event_ids[:most]
    return [permalink(r.room_id, e, via) for e in ids]


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"


def render_text(report: Report, domain: str | None = None) -> str:
    """For the terminal: every room, every entry, every link."""
    lines = [_head(report, "Questions to the bot")]
    for r in report.rooms:
        lines.append(f"{_name(r)} ({r.room_id}): {_figures(r)}")
        if r.unanswered:
            lines.append("  nothing matched:")
        for g in r.unanswered:
            lines.append(f"  {g.count}x {_clip(g.text)}")
            lines += [f"     {link}" for link in _links(r, g, domain, None)]
    if not report.rooms:
        lines.append("no rooms: none is allowlisted and nobody asked")
    return "\n".join(lines)


def render_notice(report: Report, domain: str | None = None, what: str = "Questions here") -> Reply:
    """For a room: entries and links capped, the whole cut to fit a Matrix event."""
    plain, rich = [_head(report, what)], [f"<p>{html.escape(_head(report, what))}</p>"]
    for r in report.rooms:
        name = _name(r)
        plain.append(f"{name}: {_figures(r)}")
        rich.append(f"<p><b>{html.escape(name)}</b>: {html.escape(_figures(r))}</p>")
        if not r.unanswered:
            continue
        plain.append("  nothing matched:")
        items = []
        for g in r.unanswered[:NOTICE_GAPS]:
            links = _links(r, g, domain, NOTICE_LINKS)
            more = g.count - len(links)
            tail = f" (and {more} more)" if more > 0 else ""
            plain.append(f"  {g.count}x {_clip(g.text)} " + " ".join(links) + tail)
            asks = ", ".join(
                f'<a href="{html.escape(link)}">{n}</a>' for n, link in enumerate(links, 1)
            )
            items.append(
                f"<li>{g.count}× {html.escape(_clip(g.text))} ({asks}{html.escape(tail)})</li>"
            )
        left = len(r.unanswered) - NOTICE_GAPS
        if left > 0:
            plain.append(f"  ({left} more, `matrix-sources report` lists them all)")
            items.append(
                f"<li>({left} more: <code>matrix-sources report</code> lists them all)</li>"
            )
        rich.append("<p>Nothing matched:</p><ul>" + "".join(items) + "</ul>")
    body, formatted = "\n".join(plain), "".join(rich)
    if len(body) + len(formatted) > MAX_REPLY_CHARS:  # many rooms: the figures only
        plain = [plain[0]] + [f"{_name(r)}: {_figures(r)}" for r in report.rooms]
        plain.append(
            "(the questions are left out to keep this short: `matrix-sources report` lists them)"
        )
        body = "\n".join(plain)
        formatted = "<br>".join(html.escape(line) for line in plain)
    return Reply(body, formatted, ())


def report_refusal() -> Reply:
    return render_error(
        "Sorry, `!sources report` is for this room's moderators (power "
        f"level {ADMIN_POWER_LEVEL} or more) and the bot's admins "
        "(search.admins); ask one of them."
    )
