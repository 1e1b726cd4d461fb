"""A community's Matrix as it lives (issue 46), through a real Synapse: a room upgraded
with Synapse's own upgrade API to the newest room version it offers, a tombstone that
names a room not its successor, a space whose rooms come and go, and a room renamed.

matrix-nio cannot parse a version 12 m.room.create without `predecessor.event_id`, so
the upgrade, the space and the raw state reads go through plain HTTP here; people talk
and ask with the real client.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from matrix_sources.indexer.store.eventlog.db import reader
from tests.harness import Stack, client_call, newest_room_version, wait_for

pytestmark = [pytest.mark.synapse, pytest.mark.model]


def create_room(stack: Stack, token: str, name: str, **extra) -> str:
    body = {"name": name, "preset": "public_chat", "visibility": "public", **extra}
    url = stack.synapse.url
    return client_call(url, token, "POST", "/_matrix/client/v3/createRoom", body)["room_id"]


def listed(stack: Stack) -> str:
    return (stack.data_dir / "allowlist.yaml").read_text()


def label_of(stack: Stack, room: str) -> str | None:
    """The room's label as the service last wrote it to the event log."""
    with reader(stack.database) as db:
        row = db.execute("SELECT label FROM room_labels WHERE room_id = ?", (room,)).fetchone()
    return row[0] if row else None


def reply_body(reply: dict) -> str:
    return reply["content"]["body"]


async def test_an_upgraded_room_keeps_its_index_and_gains_its_successor(stack):
    uid, tok = stack.synapse.register_user("upgrader", "upgrader-password")
    async with ChatClient(stack.synapse.url, uid, tok) as alice:
        old = await alice.create_room("Backups", public=True)
        assert stack.cli("allowlist", "add", old).returncode == 0
        await alice.wait_for_member(old, stack.bot)
        before = await alice.send(
            old, "the restic backup job writes snapshots to the NAS every night at three"
        )
        stack.wait_indexed([before])
        version = newest_room_version(stack.synapse.url, tok)
        new = client_call(
            stack.synapse.url,
            tok,
            "POST",
            f"/_matrix/client/v3/rooms/{quote(old)}/upgrade",
            {"new_version": version},
        )["replacement_room"]
        # No admin action: the successor is listed with its predecessor named, and joined.
        wait_for("the successor listed", lambda: f"upgraded from {old}" in listed(stack))
        assert new in listed(stack)
        await alice.wait_for_member(new, stack.bot)
        create = client_call(
            stack.synapse.url,
            tok,
            "GET",
            f"/_matrix/client/v3/rooms/{quote(new)}/state/m.room.create",
        )
        assert create["predecessor"]["room_id"] == old  # what the service verified
        after = await alice.send(new, "the restic prune runs on sundays and keeps 30 days")
        stack.wait_indexed([after])
        # `--room here` in the successor covers the chain; the old hit keeps its own ids.
        body = reply_body(
            await alice.ask(new, "!sources --room here when does the restic backup run", stack.bot)
        )
        assert "every night at three" in body, body
        assert quote(before, safe="") in body or before in body, body
        assert old in body or quote(old, safe="") in body, body
        # The room renamed, then given a canonical alias: the next answer says so.
        await alice.send_state(new, "m.room.name", {"name": "Backups and Restores"})
        wait_for("the rename pushed", lambda: label_of(stack, new) == "Backups and Restores")
        body = reply_body(
            await alice.ask(new, "!sources --room here restic prune sundays", stack.bot)
        )
        assert "Backups and Restores" in body, body
        alias = "#backups-restores:localhost"
        client_call(
            stack.synapse.url,
            tok,
            "PUT",
            f"/_matrix/client/v3/directory/room/{quote(alias)}",
            {"room_id": new},
        )
        topic = "Nightly restic snapshots, pruning and restore drills"
        await alice.send_state(new, "m.room.topic", {"topic": topic})
        # The topic is not the label: wait for the canonical alias, sent after it.
        await alice.send_state(new, "m.room.canonical_alias", {"alias": alias})
        wait_for("the alias pushed", lambda: label_of(stack, new) == alias)
        reply = await alice.ask(new, "!sources --room here restic prune", stack.bot)
        assert alias in reply_body(reply), reply_body(reply)
        assert f'title="{topic}"' in reply["content"]["formatted_body"], reply["content"]
    out = stack.cli("allowlist", "list")
    assert f"upgrade {old} -> {new}" in out.stdout, out.stdout
    assert re.search(rf"{re.escape(new)}\s+# upgraded from {re.escape(old)}", out.stdout)
    entries = [e for e in stack.journal() if e.get("kind") == "upgrade" and e.get("room_id") == new]
    assert entries and entries[-1]["accepted"] is True


async def test_a_tombstone_naming_a_room_that_does_not_name_it_back_is_not_followed(stack):
    uid, tok = stack.synapse.register_user("claimer", "claimer-password")
    async with ChatClient(stack.synapse.url, uid, tok) as alice:
        room = await alice.create_room("Claimed", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await alice.wait_for_member(room, stack.bot)
        # A public room that is no upgrade of it, and a private one that claims to be.
        stranger = create_room(stack, tok, "Stranger")
        private = create_room(
            stack,
            tok,
            "Private successor",
            preset="private_chat",
            visibility="private",
            creation_content={"predecessor": {"room_id": room}},
        )
        for target in (stranger, private):
            await alice.send_state(
                room, "m.room.tombstone", {"body": "moved", "replacement_room": target}
            )
            wait_for(
                f"the tombstone to {target} judged",
                lambda t=target: [
                    e
                    for e in stack.journal()
                    if e.get("kind") == "upgrade" and e.get("room_id") == t
                ],
            )
    verdicts = {
        e["room_id"]: e
        for e in stack.journal()
        if e.get("kind") == "upgrade" and e.get("predecessor") == room
    }
    assert verdicts[stranger]["rule"] == "upgrade_unverified", verdicts
    assert verdicts[private]["rule"] == "upgrade_refused", verdicts
    assert stranger not in listed(stack) and private not in listed(stack)
    out = stack.cli("allowlist", "list").stdout
    assert f"upgrade refused {room} -> {stranger} (upgrade_unverified" in out, out


async def test_a_space_stands_for_its_public_rooms_as_they_come_and_go(stack):
    uid, tok = stack.synapse.register_user("spacer", "spacer-password")
    via = {"via": ["localhost"]}
    async with ChatClient(stack.synapse.url, uid, tok) as alice:
        space = create_room(stack, tok, "Community", creation_content={"type": "m.space"})
        sub = create_room(stack, tok, "Teams", creation_content={"type": "m.space"})
        first = await alice.create_room("Help desk", public=True)
        named = await alice.create_room("Release notes", public=True)  # listed itself too
        deep = await alice.create_room("Team room", public=True)
        private = create_room(stack, tok, "Staff", preset="private_chat", visibility="private")
        pairs = ((space, first), (space, named), (space, sub), (sub, deep), (space, private))
        for parent, child in pairs:
            await alice.send_state(parent, "m.space.child", via, state_key=child)
        await alice.send_state(space, "m.space.child", via, state_key=space)  # itself
        said = {
            first: await alice.send(first, "to reset a forgotten password use the recovery email"),
            deep: await alice.send(deep, "the team standup is at nine thirty in the blue room"),
            named: await alice.send(named, "version 2.4 ships the faster media repository"),
        }
        assert stack.cli("allowlist", "add", named).returncode == 0
        added = stack.cli("allowlist", "add", space)
        assert added.returncode == 0 and "added space" in added.stdout, added.stdout
        assert space in listed(stack).split("spaces:")[1]
        stack.wait_indexed(list(said.values()))
        # A room added to the space later: pushed, indexed within a minute.
        later = await alice.create_room("Announcements", public=True)
        news = await alice.send(later, "the new mirror server goes live on the first of march")
        await alice.send_state(space, "m.space.child", via, state_key=later)
        stack.wait_indexed([news], timeout=60)
        # A room taken out of the space leaves the corpus with what it said.
        await alice.send_state(space, "m.space.child", {}, state_key=first)
        await alice.send_state(space, "m.space.child", {}, state_key=named)
        wait_for("the removed room purged", lambda: stack.event_status(said[first]) != "indexed")
        wait_for("its text gone from every file", lambda: not stack.grep_data("recovery email"))
        assert stack.event_status(said[named]) == "indexed"  # the allowlist names it
    out = stack.cli("allowlist", "list").stdout
    assert f"space {space}" in out and f"  room {later}" in out and f"  sub-space {sub}" in out, out
    assert f"  room {deep}" in out and f"  room {first}" not in out, out
    assert f"left out {private} (not_public)" in out, out
    assert f"left out {space} (space_loop)" in out, out
    loops = [
        e for e in stack.journal() if e.get("rule") == "space_loop" and e.get("room_id") == space
    ]
    assert len(loops) == 1, loops  # once, not at every read
