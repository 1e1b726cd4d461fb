"""`matrix-sources journal [--room R] [--rule X] [--kind K]`: the journal, filtered.

Every filter is checked against what exists before anything is printed: a rule the gate
does not have, or a room that is neither allowlisted nor in the journal, is an error
naming it (a typo must not look like "nothing was refused"). A room may be given by id,
by the alias kept beside its id in allowlist.yaml, or by a name the journal recorded.
"""

from __future__ import annotations

import json
import re
import sys

from matrix_sources.indexer.config import Config
from matrix_sources.indexer.ingest import gate as rules
from matrix_sources.indexer.ingest.allowlist import load_allowlist
from matrix_sources.indexer.store.journal import Journal

KINDS = ("refusal", "purge", "derived_excluded", "server_acl", "upgrade", "space")
LEGACY_OWN = "own_message"  # journalled as a refusal before the bot's own were skipped


def allowlist_aliases(cfg: Config) -> dict[str, str]:
    """alias -> room id, from the comments `allowlist add` keeps beside each id."""
    out: dict[str, str] = {}
    try:
        text = cfg.allowlist_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        m = re.match(r"""\s*-\s*['"]?(![^\s'"#]+)['"]?\s*#(.*)$""", line)
        if m:
            for alias in re.findall(r"#[^\s:]+:[^\s]+", m.group(2)):
                out[alias] = m.group(1)
    return out


def run_journal(cfg: Config, room: str | None, rule: str | None, kind: str | None) -> int:
    journal = Journal(cfg.journal_path)
    entries = list(journal.read())
    if rule is not None:
        known = set(rules.RULES) | {e["rule"] for e in entries if isinstance(e.get("rule"), str)}
        if rule not in known:
            print(
                f"error: --rule {rule!r} is not a rule; the rules are: {', '.join(sorted(known))}",
                file=sys.stderr,
            )
            return 2
    kinds = set(KINDS) | {e["kind"] for e in entries if isinstance(e.get("kind"), str)}
    if kind is not None and kind not in kinds:
        print(
            f"error: --kind {kind!r} is not a kind; the kinds are: {', '.join(sorted(kinds))}",
            file=sys.stderr,
        )
        return 2
    if room is not None:
        aliases = allowlist_aliases(cfg)
        room = aliases.get(room, room)
        known_rooms = set(load_allowlist(cfg.allowlist_path)) | {
            v for e in entries for v in (e.get("room_id"), e.get("room")) if v
        }
        if room not in known_rooms:
            print(
                f"error: --room {room!r} is unknown: it is not on the allowlist "
                f"({cfg.allowlist_path}) and the journal has nothing of it. Give a room id "
                "(`matrix-sources allowlist list`) or an alias listed beside one.",
                file=sys.stderr,
            )
            return 2
    for entry in journal.read(room=room, rule=rule, kind=kind):
        if entry.get("rule") == LEGACY_OWN and rule != LEGACY_OWN:
            continue  # the bot's own messages, journalled by older releases: not refusals
        print(json.dumps(entry, ensure_ascii=False, sort_keys=True))
    return 0
