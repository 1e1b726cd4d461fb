"""`matrix-sources allowlist list|add|remove`: the rooms allowlist.yaml lists. An alias is
resolved through the homeserver and kept as a comment beside its id; a room added is
judged at once as the service will judge it (door.py), so one it will refuse says why."""

from __future__ import annotations

import sys

from matrix_sources.indexer.config import Config, ConfigError
from matrix_sources.indexer.datadir import service_registration
from matrix_sources.indexer.ingest.allowlist import ROOM_ID, add_room, load_allowlist, remove_room

from ..homeserver.aliases import AliasError, resolve_alias
from .door import Verdict, judge_at_door


def run_allowlist(cfg: Config, args) -> int:
    """`args.action`: list, add (`args.rooms`, ids or aliases; `args.comment`) or remove."""
    if args.action == "list":
        for listed in load_allowlist(cfg.allowlist_path):
            print(listed)
        return 0
    if args.action == "add":
        try:
            resolved = _resolve_rooms(cfg, args.rooms)  # all or nothing is written
        except (AliasError, ConfigError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for room, alias in resolved:
            # An alias is kept as a comment beside the id it resolved to.
            comment = " ".join(c for c in (alias, args.comment) if c) or None
            changed = add_room(cfg.allowlist_path, room, comment)
            shown = f"{room} ({alias})" if alias else room
            _say_at_door(cfg, changed, room, shown)
        return 0
    for room in args.rooms:
        changed = remove_room(cfg.allowlist_path, room)
        print(f"{'removed' if changed else 'not listed'}: {room}")
    return 0


def _say_at_door(cfg: Config, added: bool, room: str, shown: str) -> None:
    """What the service will make of the room, read now from the homeserver as the bot
    (cli/door.py): a room it will refuse says so and why, not a bare `added:`."""
    try:
        verdict = judge_at_door(cfg, service_registration(cfg).as_token, room, join=added)
    except ConfigError as e:
        verdict = Verdict("unknown", f"no token to ask the homeserver with ({e})")
    done = "added" if added else "already listed"
    if verdict.rule is None or verdict.rule == "unknown":
        print(f"{done}: {shown}")
        if verdict.rule == "unknown":
            print(f"  not checked now: {verdict.detail}; `matrix-sources doctor` checks it later")
        return
    print(
        f"{done}, but it will be refused: {shown}: {verdict.detail} (journal rule {verdict.rule})"
    )
    if verdict.fix:
        print(f"  fix: {verdict.fix}")


def _resolve_rooms(cfg: Config, rooms: list[str]) -> list[tuple[str, str | None]]:
    """(room id, alias it came from) for each argument; aliases are resolved through the
    homeserver with the registration's as_token."""
    out: list[tuple[str, str | None]] = []
    token: str | None = None
    for room in rooms:
        if not room.startswith("#"):
            if not ROOM_ID.match(room):
                raise ConfigError(
                    cfg.allowlist_path,
                    "rooms",
                    f"{room!r} is not a room id like "
                    "'!abc:example.org' or an alias like '#room:example.org'",
                )
            out.append((room, None))
            continue
        if token is None:
            token = service_registration(cfg).as_token
        out.append((resolve_alias(cfg.homeserver.url, token, room), room))
    return out
