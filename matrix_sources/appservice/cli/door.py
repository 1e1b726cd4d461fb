"""`allowlist add` says at the door whether the service will refuse the room, and why.

The room is read from the homeserver as the service reads it, as the bot with the as_token: its
state (`GET /rooms/{id}/state`), judged by the same Gate with the same settings. A room the bot
cannot read yet is joined, as the service joins every allowlisted room at start (only a room just
added), through the room's via servers when it lives on another homeserver; a join the
homeserver refuses (invite only, the bot banned, nobody known to let the bot in) says
so. Right after a join to another homeserver's room, the state waits for the full member
list (Synapse's partial-state join): a room whose list is still arriving is not judged
from part of it (`unknown`, and `doctor` checks it later). Blocking HTTP
(appservice/httpclient.py), like alias resolution: a short-lived command, no event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode

from matrix_sources.indexer.config import Config
from matrix_sources.indexer.ingest.events import StateEvent, parse_event
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import facts_from_state
from matrix_sources.indexer.records import RoomID, UserID

from ..homeserver.joining import NO_SERVERS, join_servers, no_way_in
from ..httpclient import HttpClient, Unreachable
from .doctor import FIXES

TIMEOUT_S = 10.0
FIXES = {
    **FIXES,
    "history_not_shared": (
        "set the room's history visibility to `shared` (members since they joined "
        "cannot read older messages otherwise)"
    ),
    "bot_banned": "a moderator of the room must unban the bot, then invite it",
}


@dataclass(frozen=True)
class Verdict:
    rule: str | None  # None: it will be indexed; "unknown": it could not be checked
    detail: str
    fix: str = ""


def judge_at_door(
    cfg: Config,
    token: str,
    room_id: str,
    join: bool = True,
    timeout: float = TIMEOUT_S,
    via: tuple[str, ...] = (),
) -> Verdict:
    """`join`: only for a room just added, which the service would join within seconds
    anyway; a room already listed is never joined from here (a bot its moderators sent
    away waits for their invite). `via`: the servers to join through."""
    client = HttpClient(cfg.homeserver.url, token, timeout)
    room = quote(room_id, safe="")
    state = f"/_matrix/client/v3/rooms/{room}/state"
    try:
        resp = client.call("GET", state)
        if resp.status in (403, 404) and not join:
            return Verdict("unknown", "the bot is not in the room")
        if resp.status in (403, 404):
            servers = join_servers(room_id, via, own=cfg.homeserver.domain)
            query = urlencode([(k, s) for s in servers for k in ("via", "server_name")])
            joined = client.call(
                "POST", f"/_matrix/client/v3/join/{room}{'?' + query if query else ''}", {}
            )
            if joined.status != 200:
                err = joined.error
                if NO_SERVERS in err or (servers and joined.status in (404, 502, 504)):
                    return Verdict(
                        "no_way_in",
                        f"the bot cannot join ({joined.status} {err})",
                        no_way_in(room_id, cfg.bot_user, servers),
                    )
                if "banned" in err.lower():
                    return Verdict(
                        "bot_banned", "the bot is banned from the room", FIXES["bot_banned"]
                    )
                if joined.status == 403:
                    return Verdict(
                        "not_public",
                        f"the bot cannot join ({err or 403}): the room is not public",
                        FIXES["not_public"],
                    )
                return Verdict("unknown", f"the bot cannot join ({joined.status} {err})".rstrip())
            try:
                resp = client.call("GET", state)
            except Unreachable:
                return Verdict(
                    "unknown",
                    "the bot joined; the room's full member list is still arriving from "
                    "its other servers",
                )
    except Unreachable as e:
        return Verdict(
            "unknown", f"the homeserver at {cfg.homeserver.url} is unreachable ({e.reason})"
        )
    body = resp.data
    if resp.status != 200 or not isinstance(body, list):
        return Verdict("unknown", f"the bot cannot read the room's state ({resp.status})")
    facts = facts_from_state([e for e in map(parse_event, body) if isinstance(e, StateEvent)])
    gate = Gate(
        frozenset({RoomID(room_id)}),
        UserID(cfg.bot_user),
        cfg.puppet_patterns,
        cfg.bridge_servers,
        cfg.bridge_puppets,
        require_world_readable=cfg.index.require_world_readable,
    )
    refusal = gate.judge_room(RoomID(room_id), facts) or gate.judge_visibility(
        RoomID(room_id), None, facts
    )
    if refusal is None:
        return Verdict(None, "it will be indexed")
    why = {
        "not_public": "not public",
        "encrypted_room": "encrypted",
        "bridged_room": "bridged",
        "direct_message": "a direct message",
        "puppet_sender": "a bridge puppet is a member",
        "history_not_shared": "history is for members only",
    }.get(refusal.rule, refusal.rule)
    detail = f"{why}{f' ({refusal.detail})' if refusal.detail else ''}"
    return Verdict(refusal.rule, detail, FIXES.get(refusal.rule, ""))
