"""Upgrades and spaces followed by the service (appservice/homeserver/upgrades.py,
spaces.py), against a recording homeserver: a successor accepted only when its create
names the room back (both `predecessor` shapes), a loop A -> B -> A journalled and not
followed, a refused successor left; a space of 10,000 rooms read in bounded pages, read
again when a child is pushed and each index.space_reread_seconds of the fake clock, and
kept as it was when the homeserver fails."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from mautrix.errors import MatrixRequestError

from matrix_sources.appservice.homeserver.spaces import Spaces
from matrix_sources.appservice.homeserver.upgrades import Upgrades
from matrix_sources.indexer.ingest.allowlist import load_allowlist, load_listed
from matrix_sources.indexer.ingest.followed import Followed, load_followed
from matrix_sources.indexer.ingest.gate import Gate
from matrix_sources.indexer.ingest.roomfacts import RoomFacts
from matrix_sources.indexer.ingest.roomlinks import Lineage
from matrix_sources.indexer.records import RoomID, UserID
from matrix_sources.indexer.store.journal import Journal
from tests.fakeclock import FakeClock

BOT = UserID("@bot:x")


class Homeserver:
    """Room state and hierarchy pages by room id; records joins, leaves and requests."""

    def __init__(self) -> None:
        self.state: dict[str, list[dict]] = {}
        self.pages: dict[str, list[dict]] = {}
        self.joined: list[str] = []
        self.servers: list[list[str] | None] = []  # each join's via servers
        self.left: list[str] = []
        self.requests: list[tuple[str, dict]] = []
        self.failing = False
        self.api = SimpleNamespace(request=self.request)

    async def join_room(self, room, servers=None, max_retries=4):
        assert max_retries == 0  # a refused join is a verdict, not a 100 s retry
        if self.failing:
            raise MatrixRequestError(502, "M_UNKNOWN", "gateway")
        self.joined.append(room)
        self.servers.append(servers)
        return room

    async def leave_room(self, room):
        self.left.append(room)

    async def request(self, method, path, query_params=None):
        p = str(path)
        self.requests.append((p, dict(query_params or {})))
        room = p.split("/rooms/")[1].split("/")[0].replace("%21", "!").replace("%3A", ":")
        if p.endswith("/hierarchy"):
            pages = self.pages[room]
            i = int((query_params or {}).get("from", "0"))
            page = dict(pages[i])
            if i + 1 < len(pages):
                page["next_batch"] = str(i + 1)
            return page
        events = self.state[room]
        if p.endswith("/state"):
            return events
        etype = p.rsplit("/", 1)[1]
        return next(e["content"] for e in events if e["type"] == etype)


def public_room(rid: str, create: dict) -> list[dict]:
    ev = {"room_id": rid, "sender": "@a:x", "state_key": ""}
    return [
        {**ev, "event_id": "$c" + rid, "type": "m.room.create", "content": create},
        {
            **ev,
            "event_id": "$j" + rid,
            "type": "m.room.join_rules",
            "content": {"join_rule": "public"},
        },
    ]


def upgrades_world(tmp_path, rooms=("!a",)):
    (tmp_path / "allowlist.yaml").write_text("rooms:\n" + "".join(f"  - '{r}'\n" for r in rooms))
    cfg = SimpleNamespace(
        allowlist_path=tmp_path / "allowlist.yaml",
        data_dir=tmp_path,
        homeserver=SimpleNamespace(domain="x"),
    )
    hs = Homeserver()
    journal = Journal(tmp_path / "journal.jsonl")
    ingest = SimpleNamespace(
        facts={}, gate=Gate(frozenset(map(RoomID, rooms)), BOT), lineage=Lineage(), journal=journal
    )
    listed: list[int] = []

    async def on_listed():
        listed.append(1)

    up = Upgrades(cfg, lambda: hs, ingest, Followed(), on_listed)
    return up, hs, ingest, journal, listed


def verdicts(journal: Journal) -> list[tuple]:
    return [(e["predecessor"], e["room_id"], e.get("rule")) for e in journal.read(kind="upgrade")]


def test_a_successor_naming_the_room_back_is_listed_with_its_predecessor(tmp_path):
    up, hs, ingest, journal, listed = upgrades_world(tmp_path)
    hs.state["!b"] = public_room("!b", {"room_version": "12", "predecessor": {"room_id": "!a"}})
    ingest.facts[RoomID("!a")] = RoomFacts(join_rule="public", successor=RoomID("!b"))
    assert up.tombstones(
        [{"type": "m.room.tombstone", "room_id": "!a", "sender": "@a:x"}, "junk"]
    ) == [("!a", "@a:x")]
    asyncio.run(up.check("!a", "@a:x"))
    assert load_allowlist(tmp_path / "allowlist.yaml") == ["!a", "!b"]
    assert "# upgraded from !a" in (tmp_path / "allowlist.yaml").read_text()
    assert ingest.lineage.whole_chain("!b") == ["!a", "!b"] and listed == [1]
    assert verdicts(journal) == [("!a", "!b", None)]
    assert load_followed(tmp_path).accepted_links() == [("!a", "!b")]
    asyncio.run(up.check("!a"))  # pushed again: nothing more
    assert hs.joined == ["!b"] and listed == [1]
    assert hs.servers == [None]  # a room of the bot's own server: joined as it is
    assert [r.via for r in load_listed(tmp_path / "allowlist.yaml")] == [(), ()]


def test_a_remote_successor_is_joined_and_listed_through_the_tombstone_senders_server(tmp_path):
    """A version 12 room id names no server: the successor of a room on another
    homeserver is joined through the server of the tombstone's sender, and listed with
    it, as `allowlist add` lists a remote room (a later join needs a way in)."""
    up, hs, ingest, journal, listed = upgrades_world(tmp_path)
    hs.state["!b"] = public_room("!b", {"room_version": "12", "predecessor": {"room_id": "!a"}})
    ingest.facts[RoomID("!a")] = RoomFacts(join_rule="public", successor=RoomID("!b"))
    asyncio.run(up.check("!a", "@owner:other.example:8448"))
    assert hs.servers == [["other.example:8448"]]
    [_, b] = load_listed(tmp_path / "allowlist.yaml")
    assert (b.room_id, b.via) == ("!b", ("other.example:8448",))
    assert "# upgraded from !a" in (tmp_path / "allowlist.yaml").read_text()
    assert verdicts(journal) == [("!a", "!b", None)]


def test_a_room_cannot_adopt_an_index_by_claiming_it(tmp_path):
    up, hs, ingest, journal, listed = upgrades_world(tmp_path)
    hs.state["!b"] = public_room("!b", {"predecessor": {"room_id": "!other", "event_id": "$t"}})
    ingest.facts[RoomID("!a")] = RoomFacts(join_rule="public", successor=RoomID("!b"))
    asyncio.run(up.check("!a"))
    assert verdicts(journal) == [("!a", "!b", "upgrade_unverified")]
    assert (
        hs.left == ["!b"] and listed == [] and load_allowlist(tmp_path / "allowlist.yaml") == ["!a"]
    )


def test_a_successor_the_gate_refuses_gets_a_journal_entry_only(tmp_path):
    up, hs, ingest, journal, listed = upgrades_world(tmp_path)
    hs.state["!b"] = public_room("!b", {"predecessor": {"room_id": "!a"}}) + [
        {
            "room_id": "!b",
            "event_id": "$e",
            "sender": "@a:x",
            "state_key": "",
            "type": "m.room.encryption",
            "content": {"algorithm": "m.megolm.v1.aes-sha2"},
        }
    ]
    ingest.facts[RoomID("!a")] = RoomFacts(join_rule="public", successor=RoomID("!b"))
    asyncio.run(up.check("!a"))
    assert verdicts(journal) == [("!a", "!b", "upgrade_refused")]
    assert hs.left == ["!b"] and listed == []
    [u] = load_followed(tmp_path).upgrades
    assert not u.accepted and u.detail.startswith("encrypted_room")


def test_a_tombstone_loop_is_journalled_and_not_followed(tmp_path):
    up, hs, ingest, journal, listed = upgrades_world(tmp_path, rooms=("!a", "!b"))
    ingest.lineage.link(RoomID("!a"), RoomID("!b"))
    ingest.facts[RoomID("!b")] = RoomFacts(join_rule="public", successor=RoomID("!a"))
    assert up.upgraded() == ["!b"]
    asyncio.run(up.check("!b"))
    assert verdicts(journal) == [("!b", "!a", "upgrade_loop")]
    assert hs.joined == [] and listed == []


def spaces_world(tmp_path, clock):
    (tmp_path / "allowlist.yaml").write_text("rooms: []\nspaces:\n  - '!s'\n")
    cfg = SimpleNamespace(
        allowlist_path=tmp_path / "allowlist.yaml",
        data_dir=tmp_path,
        index=SimpleNamespace(space_depth=2, space_max_rooms=2_000, space_reread_seconds=60.0),
    )
    hs = Homeserver()
    changed: list[int] = []

    async def on_changed():
        changed.append(1)

    journal = Journal(tmp_path / "journal.jsonl")
    spaces = Spaces(cfg, lambda: hs, journal, Followed(), on_changed, clock.clock)
    return spaces, hs, journal, changed


def space_pages(children: list[str]) -> list[dict]:
    via = {"via": ["x"]}
    top = {
        "room_id": "!s",
        "room_type": "m.space",
        "children_state": [
            {"type": "m.space.child", "state_key": c, "content": via} for c in children
        ],
    }
    rooms = [{"room_id": c, "join_rule": "public"} for c in children]
    return [{"rooms": [top, *rooms[:99]]}] + [
        {"rooms": rooms[i : i + 100]} for i in range(99, len(rooms), 100)
    ]


async def _ten_thousand(tmp_path):
    clock = FakeClock(1000.0)
    spaces, hs, journal, changed = spaces_world(tmp_path, clock)
    hs.pages["!s"] = space_pages([f"!c{i}" for i in range(10_000)])
    await spaces.due()
    assert changed == [1]
    reading = spaces.followed.spaces["!s"]
    assert reading.truncated and len(reading.rooms) == 2_000
    pages = [q for p, q in hs.requests if p.endswith("/hierarchy")]
    assert len(pages) <= 2_000 // 100 + 2  # bounded: not the 101 pages of the whole space
    assert all(q["limit"] == "100" and q["max_depth"] == "3" for q in pages)
    # Read again after space_reread_seconds of the fake clock: the same, no new journal.
    await clock.advance(30)
    await spaces.due()
    assert len([p for p, _ in hs.requests if p.endswith("/hierarchy")]) == len(pages)
    await clock.advance(30)
    await spaces.due()
    assert len([p for p, _ in hs.requests if p.endswith("/hierarchy")]) == 2 * len(pages)
    assert changed == [1]
    assert [e["rule"] for e in journal.read(kind="space")] == ["space_truncated"]
    saved = json.loads((tmp_path / "followed.json").read_text())
    assert len(saved["spaces"]["!s"]["rooms"]) == 2_000


def test_a_ten_thousand_room_space_is_read_in_bounded_pages(tmp_path):
    asyncio.run(_ten_thousand(tmp_path))


async def _pushed(tmp_path):
    clock = FakeClock(1000.0)
    spaces, hs, journal, changed = spaces_world(tmp_path, clock)
    hs.pages["!s"] = space_pages(["!a"])
    await spaces.due()
    assert spaces.followed.spaces["!s"].rooms == ["!a"]
    # A child added is pushed: read again at the next poll, not a minute later.
    hs.pages["!s"] = space_pages(["!a", "!b"])
    spaces.saw([{"type": "m.space.child", "room_id": "!s", "state_key": "!b"}, None])
    await clock.advance(1)
    await spaces.due()
    assert spaces.followed.spaces["!s"].rooms == ["!a", "!b"] and changed == [1, 1]
    # The homeserver failing: what the space brought stays (an outage purges nothing).
    hs.failing = True
    await clock.advance(60)
    await spaces.due()
    assert spaces.followed.spaces["!s"].rooms == ["!a", "!b"] and changed == [1, 1]


def test_a_child_pushed_is_read_at_once_and_a_failed_read_keeps_the_last(tmp_path):
    asyncio.run(_pushed(tmp_path))
