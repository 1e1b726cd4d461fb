"""`matrix-sources doctor`: check a deployment and say how to fix what is wrong.

Checks, in order (later ones need earlier ones): the config; the registration; the
homeserver (reachable, accepts as_token as the bot); every allowlisted room (the bot can
read it, and what the gate makes of its facts); the digest room (the bot is in it, it is
not allowlisted, the last digest was posted); spaces' rooms and upgrades
(doctor_follow.py); the event log is whole (quick_check); the store opens and holds
every window the event log says is indexed; the model loads (doctor_index.py); the
rooms' languages (doctor_languages.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import quote

from matrix_sources.indexer.config import Config, ConfigError, load_config
from matrix_sources.indexer.datadir import (
    Registration,
    readable_by_others,
    service_registration,
    token_files,
)
from matrix_sources.indexer.ingest.allowlist import load_listed
from matrix_sources.indexer.ingest.events import StateEvent, parse_event
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import facts_from_state
from matrix_sources.indexer.ingest.sentaway import sent_away_at
from matrix_sources.indexer.records import RoomID, UserID

from ..homeserver.joining import join_servers, no_way_in, server_of
from ..httpclient import HttpClient, Unreachable
from .check import Check
from .doctor_follow import check_followed
from .doctor_index import (
    check_collection,
    check_eventlog_health,
    check_model,
    check_sqlite_left_behind,
    check_store,
)
from .doctor_languages import language_warnings

FIXES = {
    "not_public": "make the room public (join rule `public`) or remove it from the allowlist",
    "direct_message": "DMs are never indexed: remove it from the allowlist",
    "encrypted_room": "encrypted rooms are never indexed: remove it from the allowlist",
    "bridged_room": "bridged rooms are never indexed: remove it from the allowlist",
    "puppet_sender": "a bridge puppet is in the room: remove it from the allowlist",
}


def check_token_files(cfg: Config) -> Iterator[Check]:
    """A file holding a token that others can read lets them act as the bot. The
    registration may be readable by its group (Synapse's: init --synapse-group); a token
    file of its own, by nobody but its owner."""
    files = [(cfg.registration_path, True, "chmod 0640 (group: Synapse's) or 0600")]
    files += [(src.file, False, "chmod 0600") for src in token_files(cfg).values()]
    files.append((cfg.api_token_path, False, "chmod 0600"))  # the search API's read token
    for file, group_ok, fix in files:
        who = readable_by_others(file, group_ok=group_ok)
        if who is not None:
            yield Check(
                "token file",
                True,
                f"{file} holds a token and {who} can read it",
                f"{fix} {file}",
                warning=True,
            )


def _get(cfg: Config, path: str, token: str) -> tuple[int, object]:
    """(status, the JSON body or None); Unreachable when the homeserver did not answer."""
    resp = HttpClient(cfg.homeserver.url, token).call("GET", path)
    return resp.status, resp.data


def check_homeserver(cfg: Config, reg: Registration) -> Check:
    try:
        status, body = _get(cfg, "/_matrix/client/v3/account/whoami", reg.as_token)
    except Unreachable as e:
        return Check(
            "homeserver",
            False,
            f"{cfg.homeserver.url} unreachable ({e.reason})",
            f"start the homeserver, or fix homeserver.url in {cfg.file}",
        )
    user = body.get("user_id") if isinstance(body, dict) else None
    if status != 200:
        code = body.get("errcode") if isinstance(body, dict) else status
        return Check(
            "homeserver",
            False,
            f"whoami with as_token was refused ({code})",
            f"list {cfg.registration_path} in app_service_config_files of "
            "homeserver.yaml and restart the homeserver",
        )
    if user != cfg.bot_user:
        return Check(
            "homeserver",
            False,
            f"the token belongs to {user}, not {cfg.bot_user}",
            "check homeserver.domain and appservice.bot_localpart",
        )
    return Check("homeserver", True, f"{cfg.homeserver.url} accepts the registration as {user}")


def check_room(
    cfg: Config, reg: Registration, gate: Gate, room_id: str, via: tuple[str, ...] = ()
) -> Check:
    """The room as the service judges it, read as the bot. A room the bot is not in
    that no server the bot knows can let it into (on another homeserver, no via) says
    what to do: a via server, or an invite."""
    try:
        status, body = _get(
            cfg, f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/state", reg.as_token
        )
    except Unreachable as e:
        if isinstance(e.reason, TimeoutError) or "timed out" in str(e.reason):
            # Synapse answers /state only once it has the room's full state: right after
            # a join to another homeserver's room (a partial-state join) that can take
            # minutes for a big room. Not judged from part of it.
            return Check(
                f"room {room_id}",
                True,
                f"the homeserver did not answer with the room's state in time ({e.reason})",
                "if the bot has just joined this room on another homeserver, its member "
                "list is still arriving: run doctor again in a few minutes",
                warning=True,
            )
        return Check(f"room {room_id}", False, f"homeserver unreachable ({e.reason})")
    own = cfg.homeserver.domain
    if (
        status in (403, 404)
        and server_of(room_id) != own  # a room of the bot's own server: as it always was
        and not join_servers(room_id, via, own=own)
    ):
        return Check(
            f"room {room_id}",
            False,
            f"the bot is not in the room ({status}), and knows no server in it to join "
            "through (a room on another homeserver needs one; on this one, check the id)",
            no_way_in(room_id, cfg.bot_user, []),
        )
    if status != 200 or not isinstance(body, list):
        return Check(
            f"room {room_id}",
            False,
            f"the bot cannot read the room ({status})",
            "check the room id; make sure the room exists and the bot can join it "
            "(it joins allowlisted rooms at start: is the service running?)"
            + (f"; it joins through {', '.join(via)}" if via else ""),
        )
    facts = facts_from_state([e for e in map(parse_event, body) if isinstance(e, StateEvent)])
    label = facts.label or room_id
    summary = (
        f"{label}: join rule {facts.join_rule}, {len(facts.members)} members"
        f"{', encrypted' if facts.encrypted else ''}{', bridged' if facts.bridged else ''}"
    )
    refusal = gate.judge_room(RoomID(room_id), facts)
    if refusal is not None:
        return Check(
            f"room {room_id}",
            False,
            f"{summary}; refused ({refusal.rule})",
            FIXES.get(refusal.rule, "remove it from the allowlist"),
        )
    return Check(f"room {room_id}", True, f"{summary}; indexed")


def check_digest(cfg: Config, reg: Registration, allowlist: list[str]) -> Iterator[Check]:
    """moderation.digest_room: a room, not an allowlisted one, that the bot is in (else no
    digest can be posted); and whether the last digest failed (the service's meta)."""
    wanted = cfg.moderation.digest_room
    if wanted is None:
        return
    name = "digest room"
    fix = f"change moderation.digest_room in {cfg.file}"
    room = wanted
    try:
        if wanted.startswith("#"):
            status, body = _get(
                cfg, f"/_matrix/client/v3/directory/room/{quote(wanted, safe='')}", reg.as_token
            )
            found = body.get("room_id") if isinstance(body, dict) else None
            if status != 200 or not isinstance(found, str):
                yield Check(name, False, f"{wanted} does not resolve to a room ({status})", fix)
                return
            room = found
        if room in allowlist:
            yield Check(
                name,
                False,
                f"{wanted} is allowlisted: the digest is never posted "
                "into an indexed room, and the service refuses to start",
                f"name the moderators' private room instead ({fix}), or take {room} "
                "off the allowlist",
            )
            return
        status, body = _get(
            cfg, f"/_matrix/client/v3/rooms/{quote(room, safe='')}/joined_members", reg.as_token
        )
    except OSError as e:
        yield Check(name, False, f"homeserver unreachable ({e})")
        return
    joined = body.get("joined") if isinstance(body, dict) else None
    if status != 200 or not isinstance(joined, dict) or cfg.bot_user not in joined:
        yield Check(
            name,
            False,
            f"the bot is not in {wanted} ({status}): no digest can be posted there",
            f"invite {cfg.bot_user} to {wanted} (it joins when invited), or {fix}",
        )
        return
    yield Check(
        name, True, f"{wanted}: the bot is in it, a digest {cfg.moderation.digest_interval}"
    )
    from matrix_sources.indexer.store.eventlog.reports import meta_at

    problem = _json(meta_at(cfg.database, "digest_problem"))
    if problem:
        yield Check(
            name,
            True,
            f"the last digest could not be posted in {problem.get('room_id')}"
            f" ({problem.get('errcode')}); the next one is tried when due",
            f"if the bot was removed from {wanted}, invite it back",
            warning=True,
        )


def _json(text: str | None) -> dict:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def run_checks(config_path: Path) -> Iterator[Check]:
    """Each check as it is done, so a slow one (the model) is not a silent wait."""
    try:
        cfg = load_config(config_path)
    except ConfigError as e:
        yield Check("config", False, str(e), "fix the key named above")
        return
    yield Check("config", True, str(cfg.file))
    try:
        reg = service_registration(cfg)
    except ConfigError as e:
        yield Check("registration", False, str(e))
        return
    expected = f"http://{cfg.appservice.host}:{cfg.appservice.port}"
    if reg.url.rstrip("/") != expected:
        yield Check(
            "registration",
            False,
            f"url is {reg.url}, the service listens on {expected}",
            "make them agree, then restart the homeserver",
        )
    else:
        yield Check("registration", True, f"{cfg.registration_path}, url {reg.url}")
    yield from check_token_files(cfg)
    hs = check_homeserver(cfg, reg)
    yield hs
    try:
        listed = load_listed(cfg.allowlist_path)
    except ConfigError as e:
        listed = []
        yield Check("allowlist", False, str(e))
    rooms = [r.room_id for r in listed]
    via = {r.room_id: r.via for r in listed}
    away = sent_away_at(cfg.database)
    for r in rooms:
        if RoomID(r) in away:
            yield Check(
                f"room {r}",
                False,
                f"refused (bot_removed): the bot was {away[RoomID(r)].reason}",
                "ask the room's moderators to invite "
                f"{cfg.bot_user}, or remove the room from the allowlist",
            )
    gate = Gate(
        frozenset(rooms),
        UserID(cfg.bot_user),
        cfg.puppet_patterns,
        cfg.bridge_servers,
        cfg.bridge_puppets,
    )
    if hs.ok:
        for r in rooms:
            if RoomID(r) not in away:
                yield check_room(cfg, reg, gate, r, via.get(RoomID(r), ()))
        yield from check_digest(cfg, reg, list(rooms))

    # Spaces' rooms and upgrade chains (followed.json).
    def space_room(room: str) -> Check:
        return check_room(cfg, reg, gate.with_allowlist({RoomID(room)}), room)

    yield from check_followed(cfg, space_room if hs.ok else None)
    eventlog, store = check_eventlog_health(cfg), check_store(cfg)
    yield eventlog
    left = check_sqlite_left_behind(cfg)
    if left is not None:
        yield left
    yield store
    if eventlog.ok and store.ok:
        yield check_collection(cfg)
    loaded: list = []
    yield check_model(cfg, loaded)
    if loaded and eventlog.ok:
        for name, detail, fix in language_warnings(cfg, loaded[0], rooms):
            yield Check(name, True, detail, fix, warning=True)


def print_checks(checks: Iterable[Check]) -> int:
    ok = bad = 0
    for c in checks:
        mark = "WARN" if c.warning else "ok  " if c.ok else "FAIL"
        print(f"{mark} {c.name}: {c.detail}", flush=True)
        if (not c.ok or c.warning) and c.fix:
            print(f"     fix: {c.fix}", flush=True)
        ok, bad = ok + c.ok, bad + (not c.ok)
    print(f"\n{ok} ok, {bad} problem{'s' if bad != 1 else ''}")
    return 1 if bad else 0
