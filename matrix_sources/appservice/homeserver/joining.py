"""Joining a room, wherever it lives. A room on the bot's own homeserver is joined by its
id alone; one on another homeserver only through a server that is in it (the homeserver
asks that server for the join: `server_name` in the request). Those servers are, in order:
the allowlist's via for the room (from its alias or link), the server in the room id
(room versions before 12 name the server that made the room), and the servers of the
people whose messages the index holds (they were in the room). The homeserver tries them
one after another until one lets the bot in.

A join nobody could let through is one log line naming the room, the servers tried, and
what to do: a via server, or an invite. mautrix is imported where a join is made, not
here: `allowlist add` and `doctor` use the rest, and start without it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from matrix_sources.indexer.ingest.allowlist import MAX_VIA

if TYPE_CHECKING:
    from mautrix.client.api import ClientAPI

log = logging.getLogger(__name__)

# Synapse's answer to a join by id of a room its server is not in, with no server to ask.
NO_SERVERS = "no servers that are in the room"


def server_of(mxid: str) -> str:
    """`!abc:ex.org:8448` -> `ex.org:8448`; "" for a room id without one (version 12)."""
    return mxid.partition(":")[2]


def join_servers(
    room_id: str, via: Iterable[str], seen: Iterable[str] = (), own: str = ""
) -> list[str]:
    """The servers to ask for the join, in order, without repeats; never the bot's own
    (`own`): it joins a room it is in without asking anyone, and cannot ask itself."""
    servers = [*via, server_of(room_id), *seen]
    return [s for s in dict.fromkeys(servers) if s and s != own][:MAX_VIA]


def no_way_in(room_id: str, bot_user: str, tried: list[str]) -> str:
    """What to do about a room nobody the bot knows could let it into."""
    example = f"matrix-sources allowlist add '{room_id}?via=SERVER'"
    if tried:
        return (
            f"none of {', '.join(tried)} let the bot in: add a server that is in the room "
            f"(`{example}`, or its #alias:server, or a matrix.to link with ?via=), "
            f"or invite {bot_user} to it"
        )
    return (
        "the bot's homeserver is not in the room and knows no server that is: add one "
        f"(`{example}`, or its #alias:server, or a matrix.to link with ?via=), "
        f"or invite {bot_user} to it"
    )


async def join(client: ClientAPI, room_id: str, servers: list[str]) -> None:
    """POST /join/{room_id}?server_name=... (`via` since spec v1.12; Synapse reads both,
    and mautrix sends this one); none for a room the homeserver is in already. No
    retries: a join refused now is logged, and tried again at the next start."""
    from mautrix.types import RoomID as MxRoomID

    await client.join_room(MxRoomID(room_id), servers=servers or None, max_retries=0)


def join_failed(room_id: str, e: Exception, bot_user: str, tried: list[str]) -> None:
    """A room the homeserver would not let the bot join: one line with its errcode,
    reason and fix, no traceback (an allowlist of rooms it cannot reach logged a
    traceback per room at every start: 9,528 of them in bench/scale.py's log); any
    other error, with its traceback."""
    from mautrix.errors import MatrixRequestError

    if isinstance(e, MatrixRequestError):
        unreachable = NO_SERVERS in (e.message or "") or (
            tried and e.http_status in (404, 502, 504)
        )
        log.warning(
            "join_failed",
            extra={
                "room_id": room_id,
                "errcode": e.errcode,
                "reason": e.message,
                "via": ",".join(tried),
                "fix": no_way_in(room_id, bot_user, tried)
                if unreachable
                else "invite the bot, or take the room off the allowlist",
            },
        )
    else:
        log.warning("join_failed", exc_info=e, extra={"room_id": room_id, "via": ",".join(tried)})
