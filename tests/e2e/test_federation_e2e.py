"""Rooms on another homeserver (issue 50), through two real Synapses federating over
loopback (tests/federation.py): the bot's server and a remote one whose people own the
rooms. A room added by its remote alias is joined through the servers the alias named,
its history backfilled over federation, its live messages indexed, and `!sources` asked
there by a remote user answered there; what the remote side withdraws (a redaction by
the sender or a remote moderator, the room turning private, the bot kicked) leaves no
file of the data dir holding it. A remote room with a bridge puppet among its members is
refused, although right after the join the bot's server knows only part of the members
(Synapse's partial-state join)."""

from __future__ import annotations

import asyncio

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from tests.federation import Federation, federation  # noqa: F401  (the fixture)
from tests.harness import gone_from_every_file

pytestmark = [pytest.mark.synapse, pytest.mark.model]


async def wait_indexed(f: Federation, event_ids: list[str], timeout: float = 60) -> None:
    await asyncio.to_thread(f.stack.wait_indexed, event_ids, timeout)


async def remote_room(owner: ChatClient, name: str, alias: str | None = None) -> str:
    return await owner.create_room(name, public=True, alias=alias)


async def test_a_remote_room_joined_by_alias_read_live_answered_and_redacted(
    federation: Federation,
):
    f, remote_name = federation, federation.remote.server_name
    async with f.remote_person("rhea") as rhea:
        room = await remote_room(rhea, "Project", alias="project")
        history = [
            await rhea.send(room, f"release note {i}: the gannet-history build ships friday")
            for i in range(3)
        ]
        added = f.stack.cli("allowlist", "add", f"#project:{remote_name}")
        assert added.returncode == 0, added.stderr
        assert f"added: {room}" in added.stdout, added.stdout
        listed = f.stack.cli("allowlist", "list")
        assert f"{room}  via {remote_name}" in listed.stdout  # the alias's servers kept
        await f.wait_joined(rhea, room)
        await wait_indexed(f, history)  # backfilled over federation

        live = await rhea.send(room, "the mirror at osprey-live-3c1 moved to the new rack")
        canary = await rhea.send(room, "the staging password is pelican-canary-9f2e keep it")
        await wait_indexed(f, [live, canary])
        assert live in f.stack.hit_ids(room, "where did the mirror move")

        reply = await rhea.ask(room, "!sources where did the mirror move", f.bot)
        assert "osprey-live-3c1" in reply["content"]["body"]  # answered in the remote room
        assert reply["sender"] == f.bot

        assert f.stack.grep_data("pelican-canary-9f2e")  # the scan can see it
        await rhea._client.room_redact(room, canary, reason="oops")
        await gone_from_every_file(f.stack, "pelican-canary-9f2e")
        assert live in f.stack.hit_ids(room, "where did the mirror move")  # the rest stays


async def test_a_remote_moderator_redacts_then_makes_the_room_private(federation: Federation):
    f, remote_name = federation, federation.remote.server_name
    async with f.remote_person("mods") as mod, f.remote_person("sam") as sam:
        room = await remote_room(mod, "Moderated")
        await sam.join(room)
        # A matrix.to link, as Element's "Share room" gives it.
        link = f"https://matrix.to/#/{room}?via={remote_name}"
        assert f.stack.cli("allowlist", "add", link).returncode == 0
        await f.wait_joined(mod, room)
        spam = await sam.send(room, "buy cormorant-spam-71d2 coins now")
        kept = await sam.send(room, "the cormorant-kept-0b4 meeting is at nine")
        await wait_indexed(f, [spam, kept])

        await mod._client.room_redact(room, spam, reason="spam")  # a remote moderator
        await gone_from_every_file(f.stack, "cormorant-spam-71d2")
        assert f.stack.grep_data("cormorant-kept-0b4")

        await mod.send_state(room, "m.room.join_rules", {"join_rule": "invite"})
        await gone_from_every_file(f.stack, "cormorant-kept-0b4")


async def test_a_remote_moderator_kicks_the_bot(federation: Federation):
    f, remote_name = federation, federation.remote.server_name
    async with f.remote_person("kim") as kim:
        room = await remote_room(kim, "Kicking")
        said = await kim.send(room, "the heron-remote-5e1 backup runs at two")
        assert f.stack.cli("allowlist", "add", f"{room}?via={remote_name}").returncode == 0
        await f.wait_joined(kim, room)
        await wait_indexed(f, [said])

        await kim.send_state(room, "m.room.member", {"membership": "leave"}, state_key=f.bot)
        await gone_from_every_file(f.stack, "heron-remote-5e1")
        await f.wait_journal("bot_removed", room)


async def test_a_remote_room_with_a_puppet_member_is_refused_after_a_partial_state_join(
    federation: Federation,
):
    """The puppet is an ordinary member of the remote room, not needed to authorise the
    bot's join, so Synapse's partial-state join leaves it out of what the bot's server
    first knows; the gate waits for the full member list and refuses the room."""
    f, remote_name = federation, federation.remote.server_name
    async with f.remote_person("ursa") as ursa, f.remote_person("fedpuppet_tg42") as puppet:
        room = await remote_room(ursa, "Bridged elsewhere")
        for i in range(4):  # more members than the join needs, the puppet among them
            async with f.remote_person(f"crowd{i}") as c:
                await c.join(room)
        await puppet.join(room)
        said = await ursa.send(room, "the lapwing-bridged-2a7 relay is down")
        # Listed by the running service before `after` is sent: pushed before the reload
        # (the door check joins at once), it is dropped as a room not listed, with no
        # journal line to wait for.
        added = f.stack.allowlist_add(f"{room}?via={remote_name}")
        assert "it will be refused" in added.stdout and "puppet" in added.stdout, added.stdout
        await f.wait_joined(ursa, room)
        after = await ursa.send(room, "the lapwing-live-88e relay is back")
        await f.wait_journal("refusal", room, rule="puppet_sender", event_id=after)
        assert f.stack.event_status(said) is None and f.stack.event_status(after) is None
        assert not f.stack.grep_data("lapwing-")


async def test_a_remote_room_nobody_can_let_the_bot_into_says_what_to_do(federation: Federation):
    f = federation
    async with f.remote_person("vera") as vera:
        room = await remote_room(vera, "No via")  # a room id without a server (version 12)
        added = f.stack.cli("allowlist", "add", room)
        assert added.returncode == 0, added.stderr
        assert "cannot join" in added.stdout and "?via=" in added.stdout, added.stdout
        assert f"invite {f.bot}" in added.stdout
        doctor = f.stack.cli("doctor")
        assert f"room {room}" in doctor.stdout and "?via=" in doctor.stdout, doctor.stdout
        # Invited, it joins (the invite names the server to join through).
        await vera.invite(room, f.bot)
        await f.wait_joined(vera, room)
