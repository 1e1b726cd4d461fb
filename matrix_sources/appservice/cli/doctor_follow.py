"""`doctor`'s lines for what the service follows on its own (followed.json): what each
listed space brings and what was left out of it or refused in it, and the rooms' upgrade
chains, a tombstone whose successor was refused included (a warning: the room was
upgraded, the successor is not indexed, and why)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from matrix_sources.indexer.config import Config, ConfigError
from matrix_sources.indexer.ingest.allowlist import load_spaces
from matrix_sources.indexer.ingest.followed import load_followed
from matrix_sources.indexer.ingest.roomlinks import Lineage

from .check import Check

UPGRADE_FIX = (
    "the room was upgraded but its successor is not indexed: make the successor public "
    "and unencrypted, or add it with `matrix-sources allowlist add` once it passes"
)


def check_followed(cfg: Config, check_room: Callable[[str], Check] | None) -> Iterator[Check]:
    """`check_room`: each space room judged as the service judges it (None: the
    homeserver is down, the rooms are only listed)."""
    followed = load_followed(cfg.data_dir)
    try:
        spaces = load_spaces(cfg.allowlist_path)
    except ConfigError:
        spaces = []
    for space in spaces:
        r = followed.spaces.get(space)
        if r is None:
            yield Check(
                f"space {space}",
                True,
                "not read yet",
                "start the service: it reads the space and joins its rooms",
                warning=True,
            )
            continue
        left = ", ".join(f"{x} ({why})" for x, why in sorted(r.refused.items())[:10])
        more = len(r.refused) - 10
        yield Check(
            f"space {space}",
            True,
            f"brings {len(r.rooms)} room(s) and {len(r.subspaces)} sub-space(s)"
            + (f"; left out: {left}" if left else "")
            + (f" and {more} more" if more > 0 else "")
            + ("; cut at index.space_max_rooms" if r.truncated else ""),
            "raise index.space_max_rooms" if r.truncated else "",
            warning=r.truncated,
        )
        if check_room is not None:
            for room in r.rooms:
                c = check_room(room)
                # A room the admin did not list: refused is worth a look, not a failure.
                yield replace(c, name=f"{c.name} (in space {space})", ok=True, warning=not c.ok)
    chains = Lineage(followed.accepted_links())
    for _pred, succ in chains.links():
        if chains.successor(succ) is None:  # the newest of its chain: one line per chain
            yield Check(
                f"room {succ}", True, "upgrade chain " + " -> ".join(chains.whole_chain(succ))
            )
    for u in followed.upgrades:
        if not u.accepted:
            yield Check(
                f"upgrade {u.predecessor}",
                True,
                f"its tombstone names {u.successor}, not followed ({u.rule}: {u.detail})",
                UPGRADE_FIX,
                warning=True,
            )
