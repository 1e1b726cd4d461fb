"""What a reaction on one of the bot's answers says: a vote, or nothing.

    👍 (any skin tone, with or without a variation selector) -> up
    👎 (likewise)                                             -> down
    ✅ (likewise)                                             -> solved, if the asker's
    any other key                                             -> nothing: ignored

Clients send the same emoji as different keys: 👍, 👍️ (U+FE0F), 👍🏽 (a skin tone).
They are folded to one vote, so a moderator counts people, not spellings.
"""

from __future__ import annotations

from ..records import EventID, RoomID, UserID
from ..store.eventlog.feedback import Reaction, Vote
from .events import ReactionEvent

# Variation selectors (text or emoji presentation) and the five Fitzpatrick modifiers.
_FOLDED = dict.fromkeys([0xFE0E, 0xFE0F, *range(0x1F3FB, 0x1F400)])
VOTES = {
    "\N{THUMBS UP SIGN}": Vote.UP,
    "\N{THUMBS DOWN SIGN}": Vote.DOWN,
    "\N{WHITE HEAVY CHECK MARK}": Vote.SOLVED,
}


def vote_of(key: str) -> Vote | None:
    """The vote a reaction key stands for, or None."""
    return VOTES.get(key.strip().translate(_FOLDED))


def votes(reactions: list[ReactionEvent], now_ms: int) -> list[Reaction]:
    """The reactions that are votes, as the feedback table takes them; the rest dropped."""
    out = []
    for r in reactions:
        vote = vote_of(r.key)
        if vote is not None:
            out.append(
                Reaction(
                    EventID(r.event_id),
                    RoomID(r.room_id),
                    UserID(r.sender),
                    EventID(r.target),
                    vote,
                    now_ms,
                )
            )
    return out
