"""`!sources status`: per allowlisted room, what the index holds, for room admins.

Admins are users with power level 50 or more in the room where they ask, or listed in
`search.admins`. Anyone else gets a polite refusal.
"""

from __future__ import annotations

import html
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

from matrix_sources.indexer.clock import format_ts
from matrix_sources.indexer.ingest.followed import Followed
from matrix_sources.indexer.ingest.gate import OWN_MESSAGE, STATE_UNAVAILABLE
from matrix_sources.indexer.ingest.roomlinks import Lineage
from matrix_sources.indexer.records import EventID
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.eventlog.reports import room_report
from matrix_sources.indexer.store.journal import Journal

from .replies import Reply, render_error

log = logging.getLogger(__name__)
ADMIN_POWER_LEVEL = 50
PowerLevel = Callable[[str, str], Awaitable[int]]  # (room, user) -> level


async def may_see_status(
    room_id: str, user: str, admins: tuple[str, ...], power_level: PowerLevel
) -> bool:
    if user in admins:
        return True
    try:
        return await power_level(room_id, user) >= ADMIN_POWER_LEVEL
    except Exception:  # power levels unreadable: deny, never crash the reply
        log.warning("power_levels_unreadable", exc_info=True, extra={"room_id": room_id})
        return False


CREATOR_POWER = 2**53  # room version 12: creators outrank every power level


def power_from_state(state: list, user: str) -> int:
    """A user's power level from a room's full state (raw events). Since room version 12
    the creators are not listed in m.room.power_levels: they hold unlimited power."""
    create = next(
        (e for e in state if isinstance(e, dict) and e.get("type") == "m.room.create"), None
    )
    if create is not None:
        content = got if isinstance(got := create.get("content"), dict) else {}
        creators = [create.get("sender")] + list(content.get("additional_creators") or [])
        version = str(content.get("room_version", "1"))
        if version.isdigit() and int(version) >= 12 and user in creators:
            return CREATOR_POWER
    pl = next(
        (e for e in state if isinstance(e, dict) and e.get("type") == "m.room.power_levels"), None
    )
    content = got if pl and isinstance(got := pl.get("content"), dict) else {}
    users = got if isinstance(got := content.get("users"), dict) else {}
    level = users.get(user, content.get("users_default", 0))
    return level if isinstance(level, int) and not isinstance(level, bool) else 0


def follow_notes(followed: Followed) -> tuple[dict[str, str], list[str]]:
    """What `status` adds from followed.json: a note per room (its upgrade chain, the
    space that brought it) and a line per space and per upgrade refused."""
    chains = Lineage(followed.accepted_links())
    notes: dict[str, str] = {}
    for _pred, succ in chains.links():
        notes[succ] = "chain " + " -> ".join(chains.whole_chain(succ))
    lines = []
    for space, r in sorted(followed.spaces.items()):
        for room in (*r.rooms, *r.subspaces):
            notes.setdefault(room, f"in space {space}")
        left = ", ".join(f"{x} ({why})" for x, why in sorted(r.refused.items())[:5])
        lines.append(
            f"Space {space}: brings {len(r.rooms)} room(s), {len(r.subspaces)} sub-space(s)"
            + (f"; left out {len(r.refused)}: {left}" if left else "")
            + (" (cut at index.space_max_rooms)" if r.truncated else "")
        )
    for u in followed.upgrades:
        if not u.accepted:
            lines.append(
                f"Upgrade of {u.predecessor} to {u.successor} not followed: {u.rule} ({u.detail})"
            )
    return notes, lines


def render_status(
    rooms: Sequence[tuple[str, str]],
    eventlog: EventLog,
    journal: Journal,
    sent_away: dict | None = None,
    followed: Followed | None = None,
) -> Reply:
    """rooms: (room id, label) of the allowlist; sent_away: room id -> the SentAway of
    a room whose moderators removed the bot (indexer/ingest/sentaway.py); followed:
    the spaces and upgrades the service follows (a note per room, a line per space)."""
    sent_away = sent_away or {}
    notes, extra = follow_notes(followed) if followed is not None else ({}, [])
    refusals: Counter = Counter()
    seen: set[tuple] = set()
    for entry in journal.read():
        if entry.get("kind") not in ("refusal", "purge", "derived_excluded"):
            continue
        if entry.get("rule") == OWN_MESSAGE:
            continue  # journals written before the bot's answers were skipped silently
        held = entry.get("event_id") if entry.get("rule") == STATE_UNAVAILABLE else None
        if held and eventlog.status_of(EventID(held)) is not None:
            continue  # held while the room's state was not had, and read again since
        key = (entry.get("kind"), entry.get("event_id"), entry.get("rule"))
        if entry.get("event_id") and key in seen:
            continue  # read twice (backfill over pushed events) by older versions
        seen.add(key)
        refusals[entry.get("room_id")] += 1
    plain = [f"Index status: {len(rooms)} allowlisted room(s)"]
    rich = [
        f"<p>Index status: {len(rooms)} allowlisted room(s)</p><table>"
        "<tr><th>room</th><th>messages</th><th>windows</th><th>pending</th>"
        "<th>last indexed</th><th>refusals</th></tr>"
    ]
    for room_id, label in rooms:
        r = room_report(eventlog, room_id)
        last = format_ts(r["cursor_ts"]) if r["cursor_ts"] else "never"
        name = label or room_id
        if room_id in notes:
            name = f"{name} ({notes[room_id]})"
        if room_id in sent_away:
            why = f"not indexed: the bot was {sent_away[room_id].reason}"
            plain.append(f"- {name}: {why}")
            rich.append(
                f'<tr><td>{html.escape(name)}</td><td colspan="5">{html.escape(why)}</td></tr>'
            )
            continue
        plain.append(
            f"- {name}: {r['messages']} messages in {r['windows']} windows, "
            f"{r['pending']} pending, last indexed {last}, "
            f"{refusals[room_id]} refusals"
        )
        rich.append(
            f"<tr><td>{html.escape(name)}</td><td>{r['messages']}</td>"
            f"<td>{r['windows']}</td><td>{r['pending']}</td>"
            f"<td>{html.escape(last)}</td><td>{refusals[room_id]}</td></tr>"
        )
    rich.append("</table>")
    plain += extra
    rich += [f"<p>{html.escape(line)}</p>" for line in extra]
    return Reply("\n".join(plain), "".join(rich), ())


def status_refusal() -> Reply:
    return render_error(
        "Sorry, `!sources status` is for room moderators "
        f"(power level {ADMIN_POWER_LEVEL} or more) and the bot's admins."
    )
