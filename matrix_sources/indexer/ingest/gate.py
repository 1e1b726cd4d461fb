"""The ingest gate: the one place that decides what may be indexed.

Rules (DESIGN.md, "Rules the gate enforces"), checked in this order:

    room not on the allowlist  -> not_allowlisted       (never read at all)
    the bot kicked or banned    -> bot_removed           (whole room, until invited back:
                                                          sentaway.py)
    room state: its server ACL denies the bot's own homeserver
                                -> server_denied         (whole room: its moderators
                                                          shut the bot's server out)
                encrypted       -> encrypted_room        (whole room)
                bridged         -> bridged_room          (whole room)
                a DM            -> direct_message        (whole room, even if listed)
                not public      -> not_public            (whole room)
    event: m.room.encrypted     -> encrypted_event       (stored nowhere)
           sent by the bot      -> own_message
           puppet sender        -> puppet_sender         (whole room)
           sender's server denied by the room's m.room.server_acl
                                -> server_denied         (this message; what the server's
                                                          users said before leaves: admit.py)
           history visibility in force when it was sent not `shared`/`world_readable`
           (only `world_readable` with index.require_world_readable; unknowable:
           refused)        -> history_not_shared    (this message; what was sent
                                                     before stays, Matrix shows it)

Not the gate's, but journalled under the same names (ids and rule, never text):

    room state unfetchable      -> state_unavailable     (refused for now, backfilled)
    timestamp past year 9999    -> timestamp_out_of_range (quarantined, never stored)

A refusal is a typed `Refusal` naming its rule; it never carries message text.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from ..config import DEFAULT_PUPPET_PATTERNS
from ..records import EventID, Refusal, RoomID, UserID
from .events import TIMESTAMP_OUT_OF_RANGE
from .roomfacts import RoomFacts
from .serveracl import SERVER_DENIED

NOT_ALLOWLISTED = "not_allowlisted"
NOT_PUBLIC = "not_public"
DIRECT_MESSAGE = "direct_message"
ENCRYPTED_ROOM = "encrypted_room"
ENCRYPTED_EVENT = "encrypted_event"
BRIDGED_ROOM = "bridged_room"
PUPPET_SENDER = "puppet_sender"
OWN_MESSAGE = "own_message"
STATE_UNAVAILABLE = "state_unavailable"
BOT_REMOVED = "bot_removed"
HISTORY_NOT_SHARED = "history_not_shared"
USER_FORGOTTEN = "user_forgotten"  # judged by Ingest (the list lives in the event log)

RULES = (
    NOT_ALLOWLISTED,
    BOT_REMOVED,
    NOT_PUBLIC,
    DIRECT_MESSAGE,
    ENCRYPTED_ROOM,
    ENCRYPTED_EVENT,
    BRIDGED_ROOM,
    PUPPET_SENDER,
    OWN_MESSAGE,
    STATE_UNAVAILABLE,
    TIMESTAMP_OUT_OF_RANGE,
    HISTORY_NOT_SHARED,
    USER_FORGOTTEN,
    SERVER_DENIED,
)


def server_of(user: str) -> str:
    """The server part of a user id (`@a:ex.org:8448` -> `ex.org:8448`)."""
    return user.partition(":")[2]


@dataclass
class Gate:
    allowlist: frozenset[RoomID]
    bot_user: UserID
    # Match only users of `bridge_servers` (empty: the bot's own server).
    puppet_patterns: tuple[str, ...] = DEFAULT_PUPPET_PATTERNS
    bridge_servers: tuple[str, ...] = ()
    # (regex, server) from bridges' registration files: an appservice owns users of the
    # homeserver it is registered with only, so each pattern matches that server's users.
    bridge_puppets: tuple[tuple[str, str], ...] = ()
    require_world_readable: bool = False  # index.require_world_readable
    # Rooms whose moderators sent the bot away (sentaway.py keeps them); shared by copies.
    sent_away: Container[RoomID] = frozenset()
    _puppets: list[tuple[re.Pattern, frozenset[str]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        servers = frozenset(self.bridge_servers or (server_of(self.bot_user),))
        self._puppets = [(re.compile(p), servers) for p in self.puppet_patterns] + [
            (re.compile(p), frozenset({server})) for p, server in self.bridge_puppets
        ]

    def with_allowlist(self, rooms: Iterable[RoomID]) -> Gate:
        return Gate(
            frozenset(rooms),
            self.bot_user,
            self.puppet_patterns,
            self.bridge_servers,
            self.bridge_puppets,
            require_world_readable=self.require_world_readable,
            sent_away=self.sent_away,
        )

    def is_puppet(self, user: str) -> bool:
        server = server_of(user)
        return any(server in servers and p.match(user) for p, servers in self._puppets)

    def judge_room(
        self, room_id: RoomID, facts: RoomFacts | None, scan_members: bool = True
    ) -> Refusal | None:
        """A refusal that covers the whole room, or None if the room may be indexed.
        `scan_members=False` skips the one rule that costs a pass over every member
        (puppets), for callers that check the member that changed themselves."""
        if room_id not in self.allowlist:
            return Refusal(NOT_ALLOWLISTED, room_id, whole_room=True)
        if room_id in self.sent_away:
            return Refusal(BOT_REMOVED, room_id, whole_room=True)
        if facts is None or facts.join_rule is None:
            return Refusal(NOT_PUBLIC, room_id, detail="join rule unknown", whole_room=True)
        if facts.server_acl is not None and not facts.server_acl.allows_user(self.bot_user):
            # A remote room's moderators denied the bot's homeserver: its server still
            # reads the room, but they shut it out (its answers are refused there); the
            # room is handled as one the bot was banned from. Lifting the ACL lets it in.
            return Refusal(
                SERVER_DENIED,
                room_id,
                detail=f"its server ACL denies the bot's homeserver {server_of(self.bot_user)}",
                whole_room=True,
            )
        if facts.encrypted:
            return Refusal(ENCRYPTED_ROOM, room_id, whole_room=True)
        if facts.bridged:
            return Refusal(BRIDGED_ROOM, room_id, whole_room=True)
        if facts.is_dm:
            return Refusal(DIRECT_MESSAGE, room_id, whole_room=True)
        if facts.join_rule != "public":
            return Refusal(
                NOT_PUBLIC, room_id, detail=f"join rule {facts.join_rule}", whole_room=True
            )
        puppets = sorted(m for m in facts.members if self.is_puppet(m)) if scan_members else []
        if puppets:
            return Refusal(
                PUPPET_SENDER, room_id, detail=f"puppet member {puppets[0]}", whole_room=True
            )
        return None

    def judge_message(
        self, room_id: RoomID, event_id: EventID, sender: UserID, facts: RoomFacts | None
    ) -> Refusal | None:
        refusal = self.judge_room(room_id, facts)
        if refusal is not None:
            return Refusal(refusal.rule, room_id, event_id, refusal.detail, whole_room=True)
        if sender == self.bot_user:
            return Refusal(OWN_MESSAGE, room_id, event_id)
        if self.is_puppet(sender):
            return Refusal(PUPPET_SENDER, room_id, event_id, f"sender {sender}", whole_room=True)
        assert facts is not None  # judge_room refuses a room without its facts
        if facts.server_acl is not None and not facts.server_acl.allows_user(sender):
            return Refusal(SERVER_DENIED, room_id, event_id, f"server {server_of(sender)}")
        return self.judge_visibility(room_id, event_id, facts)

    def visible_to_strangers(self, facts: RoomFacts) -> bool:
        """Whether a stranger who joins now reads what is sent under these facts."""
        allowed = (
            ("world_readable",) if self.require_world_readable else ("shared", "world_readable")
        )
        return facts.history_visibility in allowed

    def judge_visibility(
        self, room_id: RoomID, event_id: EventID | None, facts: RoomFacts
    ) -> Refusal | None:
        if self.visible_to_strangers(facts):
            return None
        return Refusal(
            HISTORY_NOT_SHARED,
            room_id,
            event_id,
            f"history visibility {facts.history_visibility or 'unknown'}",
        )
