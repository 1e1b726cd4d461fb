"""`matrix-sources allowlist list|add|remove`: the rooms allowlist.yaml lists. An alias is
resolved through the homeserver and kept as a comment beside its id, with the servers the
directory named as the room's via (a room on another homeserver is joined through them);
a matrix.to link or `!id:server?via=...` gives its via too. A room added is judged at once
as the service will judge it (door.py), so one it will refuse, or cannot join, says why.
A space (its m.room.create `type` is m.space) goes under `spaces:` and stands for its
rooms; `list` shows what each space brings and the upgrade chains (followed.json)."""

from __future__ import annotations

import sys

from matrix_sources.indexer.config import Config, ConfigError
from matrix_sources.indexer.datadir import service_registration
from matrix_sources.indexer.ingest.allowlist import (
    ROOM_ID,
    RoomRefError,
    add_room,
    listed_comments,
    load_listed,
    load_spaces,
    parse_room_ref,
    remove_room,
)
from matrix_sources.indexer.ingest.followed import load_followed

from ..homeserver.aliases import AliasError, resolve_alias_via
from ..httpclient import Unreachable
from .door import Verdict, judge_at_door
from .spacedoor import space_size


def run_allowlist(cfg: Config, args) -> int:
    """`args.action`: list, add (`args.rooms`, ids or aliases; `args.comment`) or remove."""
    if args.action == "list":
        print("\n".join(list_lines(cfg)))
        return 0
    if args.action == "add":
        try:
            resolved = _resolve_rooms(cfg, args.rooms)  # all or nothing is written
        except (AliasError, ConfigError, RoomRefError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for room, alias, via in resolved:
            was_listed = any(r.room_id == room for r in load_listed(cfg.allowlist_path))
            # An alias is kept as a comment beside the id it resolved to.
            comment = " ".join(c for c in (alias, args.comment) if c) or None
            shown = f"{room} ({alias})" if alias else room
            space = _space_size(cfg, room)
            if space is not None:
                changed = add_room(cfg.allowlist_path, room, comment, key="spaces")
                print(
                    f"{'added' if changed else 'already listed'} space: {shown}: its public "
                    f"rooms are followed as they come and go ({space} now, each judged "
                    "on its own; `allowlist list` shows them once the service read it)"
                )
                continue
            changed = add_room(cfg.allowlist_path, room, comment, via)
            entry = next(r for r in load_listed(cfg.allowlist_path) if r.room_id == room)
            if was_listed and changed:
                print(f"via updated: {room} joins through {', '.join(entry.via)}")
            _say_at_door(cfg, changed and not was_listed, room, shown, entry.via)
        return 0
    for ref in args.rooms:
        room = parse_room_ref(ref)[0] if not ref.startswith("#") else ref
        changed = remove_room(cfg.allowlist_path, room)
        print(f"{'removed' if changed else 'not listed'}: {room}")
    return 0


def _say_at_door(
    cfg: Config, added: bool, room: str, shown: str, via: tuple[str, ...] = ()
) -> None:
    """What the service will make of the room, read now from the homeserver as the bot
    (cli/door.py): a room it will refuse says so and why, not a bare `added:`."""
    try:
        token = service_registration(cfg).as_token
        verdict = judge_at_door(cfg, token, room, join=added, via=via)
    except ConfigError as e:
        verdict = Verdict("unknown", f"no token to ask the homeserver with ({e})")
    done = "added" if added else "already listed"
    if verdict.rule is None or verdict.rule == "unknown":
        print(f"{done}: {shown}")
        if verdict.rule == "unknown":
            print(f"  not checked now: {verdict.detail}; `matrix-sources doctor` checks it later")
        return
    if verdict.rule == "no_way_in":
        print(f"{done}, but the bot cannot join it: {shown}: {verdict.detail}")
        print(f"  fix: {verdict.fix}")
        return
    print(
        f"{done}, but it will be refused: {shown}: {verdict.detail} (journal rule {verdict.rule})"
    )
    if verdict.fix:
        print(f"  fix: {verdict.fix}")


def _resolve_rooms(cfg: Config, rooms: list[str]) -> list[tuple[str, str | None, tuple[str, ...]]]:
    """(room id, alias it came from, via servers) for each argument: an id, an alias or
    a matrix.to link to either, with `?via=`; aliases are resolved through the
    homeserver with the registration's as_token (its answer names servers in the room)."""
    out: list[tuple[str, str | None, tuple[str, ...]]] = []
    token: str | None = None
    for arg in rooms:
        # A bare alias is taken whole (`#room:server` has no query to split off).
        room, via = (arg, ()) if arg.startswith("#") else parse_room_ref(arg)
        if not room.startswith("#"):
            if not ROOM_ID.match(room):
                raise ConfigError(
                    cfg.allowlist_path,
                    "rooms",
                    f"{arg!r} is not a room id like '!abc:example.org', an alias like "
                    "'#room:example.org', or a matrix.to link to one",
                )
            out.append((room, None, via))
            continue
        if token is None:
            token = service_registration(cfg).as_token
        room_id, servers = resolve_alias_via(cfg.homeserver.url, token, room)
        # The bot's own server is no via: a room it is in needs none (kept as before).
        remote = [s for s in servers if s != cfg.homeserver.domain]
        out.append((room_id, room, tuple(dict.fromkeys((*via, *remote)))))
    return out


def _space_size(cfg: Config, room_id: str) -> int | None:
    """The number of rooms a space lists at its first level; None for a room that is no
    space (or when the homeserver cannot say: it is then added as a room)."""
    try:
        token = service_registration(cfg).as_token
    except ConfigError:
        return None
    try:
        return space_size(cfg.homeserver.url, token, room_id)
    except Unreachable:
        return None


def list_lines(cfg: Config) -> list[str]:
    """The rooms with their comments (an alias, `upgraded from ...`), the spaces with
    what each brings and what was refused in it, and the upgrades refused."""
    followed = load_followed(cfg.data_dir)
    comments = listed_comments(cfg.allowlist_path)
    out = []
    for listed in load_listed(cfg.allowlist_path):
        room, note = listed.room_id, comments.get(listed.room_id)
        line = f"{room}  via {', '.join(listed.via)}" if listed.via else room
        out.append(f"{line}  # {note}" if note else line)
    space_notes = listed_comments(cfg.allowlist_path, "spaces")
    for space in load_spaces(cfg.allowlist_path):
        r = followed.spaces.get(space)
        note = space_notes.get(space)
        head = f"space {space}" + (f"  # {note}" if note else "")
        if r is None:
            out.append(f"{head}: not read yet (the service reads it when it runs)")
            continue
        out.append(
            f"{head}: {len(r.rooms)} room(s), {len(r.subspaces)} sub-space(s), "
            f"{len(r.refused)} left out" + (", cut at index.space_max_rooms" if r.truncated else "")
        )
        out += [f"  room {x}" for x in r.rooms]
        out += [f"  sub-space {x}" for x in r.subspaces]
        out += [f"  left out {x} ({why})" for x, why in sorted(r.refused.items())]
    for u in followed.upgrades:
        if u.accepted:
            out.append(f"upgrade {u.predecessor} -> {u.successor}")
        else:
            out.append(f"upgrade refused {u.predecessor} -> {u.successor} ({u.rule}: {u.detail})")
    return out
