"""Consent withdrawn through a real Synapse (issue 21): the bot kicked by a moderator, the
operator's `matrix-sources forget` with the service running, and `!sources forget me`.
Each leaves no text of what was withdrawn in any file of the data dir within 30 s plus
the compaction interval, and other people's messages stay searchable."""

from __future__ import annotations

import asyncio
import json

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from tests.harness import WITHDRAWAL_SECONDS, Stack, gone_from_every_file

pytestmark = [pytest.mark.synapse, pytest.mark.model]


async def test_a_banned_bot_purges_stays_away_and_comes_back_when_invited(stack):
    bot = stack.bot
    user, token = stack.synapse.register_user("mona", "mona-password")
    async with ChatClient(stack.synapse.url, user, token) as mona:
        room = await mona.create_room("Moderated", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await mona.wait_for_member(room, bot)
        said = await mona.send(room, "the kestrel-kicked-4d1e7a backup runs at two")
        stack.wait_indexed([said])
        vector = stack.vector_of(said)

        await mona.send_state(room, "m.room.member", {"membership": "ban"}, state_key=bot)
        await gone_from_every_file(stack, "kestrel-kicked-4d1e7a", vector)
        removed = [e for e in stack.journal() if e.get("kind") == "bot_removed"]
        assert removed and removed[-1]["by"] == user and removed[-1]["room_id"] == room
        assert any(
            e.get("kind") == "purge" and e.get("room_id") == room and e.get("rule") == "bot_removed"
            for e in stack.journal()
        )

        stack.service.stop()
        stack.service.start()  # ready: the allowlisted rooms were joined, but not this one
        assert bot not in await mona.members(room)
        doctor = stack.cli("doctor")
        assert "bot_removed" in doctor.stdout and user in doctor.stdout

        # Unbanned, the bot still waits for an invite.
        await mona.send_state(room, "m.room.member", {"membership": "leave"}, state_key=bot)
        await mona.invite(room, bot)  # asked back: joined and read again
        await mona.wait_for_member(room, bot)
        back = await mona.send(room, "the backup kestrel-back-8c02f1 moved to three")
        stack.wait_indexed([back])
        assert back in stack.hit_ids(room, "when does the backup run now")


async def test_a_kicked_bot_invited_back_reads_the_room_again(stack):
    """Issue 44: the kick purged the room; the moderators' invite restores it whole:
    what was said before the kick, and while the bot was away, is read again."""
    bot = stack.bot
    user, token = stack.synapse.register_user("nora", "nora-password")
    async with ChatClient(stack.synapse.url, user, token) as nora:
        room = await nora.create_room("Kicked and back", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await nora.wait_for_member(room, bot)
        before = await nora.send(room, "the heron-kicked-5b21 mirror syncs at noon")
        stack.wait_indexed([before])

        await nora.send_state(
            room, "m.room.member", {"membership": "leave"}, state_key=bot
        )  # a kick
        await gone_from_every_file(stack, "heron-kicked-5b21")
        away = await nora.send(room, "the heron-away-77c3 mirror moved to the basement")
        await nora.invite(room, bot)
        await nora.wait_for_member(room, bot)
        stack.wait_indexed([before, away])
        assert before in stack.hit_ids(room, "when does the mirror sync")
        assert away in stack.hit_ids(room, "where did the mirror move")
        assert any(
            e.get("kind") == "bot_readmitted" and e.get("room_id") == room for e in stack.journal()
        )


async def test_forget_with_the_service_running_and_forget_me(stack):
    bot = stack.bot
    olga, olga_token = stack.synapse.register_user("olga", "olga-password")
    pete, pete_token = stack.synapse.register_user("pete", "pete-password")
    async with (
        ChatClient(stack.synapse.url, olga, olga_token) as o,
        ChatClient(stack.synapse.url, pete, pete_token) as p,
    ):
        room = await o.create_room("Withdrawals", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await o.wait_for_member(room, bot)
        await p.join(room)
        kept = await o.send(room, "how do I rotate the proxy certificate before it expires?")
        olga_said = await o.send(room, "olga: kestrel-olga-3f9a2b renew it with certbot")
        pete_said = await p.send(room, "pete: kestrel-pete-a7c410 restart nginx after it")
        stack.wait_indexed([kept, olga_said, pete_said])
        pete_vector = stack.vector_of(pete_said)

        # The operator forgets pete while the service runs: through its spool.
        res = stack.cli("forget", pete)
        assert res.returncode == 0, res.stderr
        await gone_from_every_file(stack, "kestrel-pete-a7c410", pete_vector)
        after = await p.send(room, "pete again kestrel-pete-later-55d0")
        marker = await o.send(room, "and that is how the proxy certificate gets renewed")
        stack.wait_indexed([marker])
        assert stack.event_status(after) is None  # refused: user_forgotten
        assert olga_said in stack.hit_ids(room, "how do I renew the proxy certificate")

        # Olga forgets herself from the room.
        olga_vector = stack.vector_of(olga_said)
        reply = await o.ask(room, "!sources forget me", bot)
        assert reply["content"]["body"].startswith("Done: 3 messages of yours removed")
        await gone_from_every_file(stack, "kestrel-olga-3f9a2b", olga_vector)
        assert stack.grep_data("kestrel-pete-later-55d0") == []


async def test_history_for_members_only_and_retention(stack):
    bot = stack.bot
    rita, token = stack.synapse.register_user("rita", "rita-password")
    async with ChatClient(stack.synapse.url, rita, token) as r:
        joined = await r.create_room(
            "Members only",
            public=True,
            initial_state=(
                {
                    "type": "m.room.history_visibility",
                    "state_key": "",
                    "content": {"history_visibility": "joined"},
                },
            ),
        )
        switching = await r.create_room("Switching", public=True)
        kept = await r.create_room("Kept briefly", public=True)
        assert stack.cli("allowlist", "add", joined, switching, kept).returncode == 0
        for room in (joined, switching, kept):
            await r.wait_for_member(room, bot)
        hidden = await r.send(joined, "kestrel-members-only-61b2 is for members")
        before = await r.send(switching, "kestrel-before-switch-0a4e was public")
        stack.wait_indexed([before])
        await r.send_state(switching, "m.room.history_visibility", {"history_visibility": "joined"})
        after = await r.send(switching, "kestrel-after-switch-9d3c is for members")
        await r.send_state(kept, "m.room.retention", {"max_lifetime": 20_000})
        brief = await r.send(kept, "kestrel-retained-2e7f lives twenty seconds")
        # Pushed in order: once a later event is in, every one above was judged.
        last = await r.send(kept, "and a message to wait for")
        stack.wait_indexed([brief, last])
        brief_vector = stack.vector_of(brief)
        assert stack.event_status(hidden) is None
        assert stack.grep_data("kestrel-members-only-61b2") == []
        assert stack.event_status(before) == "indexed"  # sent while shared: stays
        assert stack.event_status(after) is None
        assert any(e.get("rule") == "history_not_shared" for e in stack.journal())
        await gone_from_every_file(
            stack, "kestrel-retained-2e7f", brief_vector, within=20 + WITHDRAWAL_SECONDS
        )


def with_admin_token(stack: Stack) -> str:
    """homeserver.admin_token_file set to a Synapse admin's token (the service restarted
    to read it), once per stack; returns the token."""
    import os

    from ruamel.yaml import YAML

    token_file = stack.data_dir / "synapse-admin-token"
    if token_file.exists():
        return token_file.read_text()
    _, admin_token = stack.synapse.register_user("root", "root-password", admin=True)
    token_file.write_text(admin_token)
    os.chmod(token_file, 0o600)
    yaml = YAML()
    cfg = yaml.load(stack.config.read_text())
    cfg["homeserver"]["admin_token_file"] = token_file.name
    with open(stack.config, "w") as f:
        yaml.dump(cfg, f)
    stack.service.stop()
    stack.service.start()
    return admin_token


def erase(stack: Stack, admin_token: str, user: str) -> None:
    """Deactivate `user` with erase: true, as a homeserver admin does."""
    import urllib.request

    req = urllib.request.Request(
        f"{stack.synapse.url}/_synapse/admin/v1/deactivate/{user}",
        method="POST",
        data=json.dumps({"erase": True}).encode(),
        headers={"Authorization": f"Bearer {admin_token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200


async def test_a_synapse_erasure_reaches_the_index(stack):
    """An admin deactivates a user with erase: true (Synapse keeps serving their old
    messages to members, synapse#8185): with homeserver.admin_token_file set, their text
    is in no file within a minute."""
    bot = stack.bot
    admin_token = with_admin_token(stack)

    erin, erin_token = stack.synapse.register_user("erin", "erin-password")
    fred, fred_token = stack.synapse.register_user("fred", "fred-password")
    async with (
        ChatClient(stack.synapse.url, fred, fred_token) as f,
        ChatClient(stack.synapse.url, erin, erin_token) as e,
    ):
        room = await f.create_room("Erasures", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await f.wait_for_member(room, bot)
        await e.join(room)
        said = await e.send(room, "erin says kestrel-erased-7b31c0 about the mirrors")
        kept = await f.send(room, "fred keeps kestrel-fred-kept-15e9 about the mirrors")
        stack.wait_indexed([said, kept])
        erin_vector = stack.vector_of(said)

    erase(stack, admin_token, erin)
    await gone_from_every_file(stack, "kestrel-erased-7b31c0", erin_vector, within=60)
    assert any(
        x.get("kind") == "forget"
        and x.get("user_id") == erin
        and x.get("source") == "synapse_erasure"
        for x in stack.journal()
    )
    assert stack.event_status(kept) == "indexed"


async def test_an_erasure_does_not_depend_on_when_the_user_last_left(stack):
    """Issue 44: gina left and rejoined (the check after that leave found her not
    erased), and is erased more than 35 s later; hank left for good, and is erased while
    the service is down. Both leave every file: the first through her parting, the
    second through the look at the deactivated users at start."""
    bot = stack.bot
    admin_token = with_admin_token(stack)
    gina, gina_token = stack.synapse.register_user("gina", "gina-password")
    hank, hank_token = stack.synapse.register_user("hank", "hank-password")
    ivan, ivan_token = stack.synapse.register_user("ivan", "ivan-password")
    async with (
        ChatClient(stack.synapse.url, ivan, ivan_token) as i,
        ChatClient(stack.synapse.url, gina, gina_token) as g,
        ChatClient(stack.synapse.url, hank, hank_token) as h,
    ):
        room = await i.create_room("Comings and goings", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await i.wait_for_member(room, bot)
        await g.join(room)
        await h.join(room)
        before = await g.send(room, "gina says heron-gina-before-4e1a about the tape drive")
        hank_said = await h.send(room, "hank says heron-hank-6c0d about the tape drive")
        await g.leave(room)
        await h.leave(room)  # for good
        await g.join(room)
        after = await g.send(room, "gina says heron-gina-after-9b72 about the tape library")
        kept = await i.send(room, "ivan keeps heron-ivan-kept-31f8 about the tape drive")
        stack.wait_indexed([before, hank_said, after, kept])
        vectors = {x: stack.vector_of(x) for x in (before, hank_said, after)}

    await asyncio.sleep(40)  # past the checks that gina's and hank's leaves started
    erase(stack, admin_token, gina)
    await gone_from_every_file(stack, "heron-gina-before-4e1a", vectors[before], within=60)
    await gone_from_every_file(stack, "heron-gina-after-9b72", vectors[after], within=5)
    assert stack.event_status(hank_said) == "indexed"

    stack.service.stop()
    erase(stack, admin_token, hank)  # while the service is down
    stack.service.start()
    await gone_from_every_file(stack, "heron-hank-6c0d", vectors[hank_said], within=60)
    assert stack.event_status(kept) == "indexed"
    assert {
        x.get("user_id")
        for x in stack.journal()
        if x.get("kind") == "forget" and x.get("source") == "synapse_erasure"
    } >= {gina, hank}
