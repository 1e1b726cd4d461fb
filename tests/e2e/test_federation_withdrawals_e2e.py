"""Withdrawals made on the other server (issue 50 item 4), through two real Synapses
federating over loopback (tests/federation.py): a server ACL and a room upgrade.

The ACL is the spam-wave case: the room lives on the bot's homeserver, users of the
remote server join it over federation and spam, and the room's moderators deny the
remote server. The remote server is `127.0.0.2:PORT` and the bot's `127.0.0.1:PORT`: an
ACL matches hosts, not ports, so with both on 127.0.0.1 no ACL could deny one and not
the other (and Synapse refuses an ACL that denies its own server). The ACL keeps
`allow_ip_literals` true, or it would deny both servers, whose names are IP literals.
An ACL that remote moderators set against the bot's own homeserver withdraws the whole
room, as a ban of the bot does.

The upgrade is done on the remote server by the room's remote owner with Synapse's own
upgrade API; the bot's server learns of the tombstone over federation, and the service
joins the successor through the tombstone sender's server (a version 12 room id names
no server). matrix-nio cannot parse a version 12 m.room.create without
`predecessor.event_id`, so the upgrade goes through plain HTTP, as in
test_lifecycle_e2e.py.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest

from matrix_sources.appservice.httpclient import HttpClient
from matrix_sources.appservice.tools.chatclient import ChatClient
from tests.e2e.test_federation_e2e import wait_indexed
from tests.federation import REMOTE_HOST, Federation, federation  # noqa: F401  (the fixture)
from tests.harness import client_call, gone_from_every_file, newest_room_version, wait_for

pytestmark = [pytest.mark.synapse, pytest.mark.model]

SPAM_CANARY = "gullspam-4c81"


def journal_lines(f: Federation, kind: str, room: str) -> list[dict]:
    return [e for e in f.stack.journal() if e.get("kind") == kind and e.get("room_id") == room]


async def test_a_remote_spam_wave_leaves_every_file_when_the_moderators_deny_its_server(
    federation: Federation,
):
    f, home = federation, federation.stack.synapse
    uid, tok = home.register_user("harbourmod", "harbourmod-password")
    async with ChatClient(home.url, uid, tok) as mod:
        room = await mod.create_room("Harbour", public=True, alias="harbour")
        f.stack.allowlist_add(room)
        await mod.wait_for_member(room, f.bot)
        kept = await mod.send(room, "the harbour-kept-3d9 ferry leaves the north pier at noon")
        async with f.remote_person("gull1") as gull1, f.remote_person("gull2") as gull2:
            for gull in (gull1, gull2):  # over federation, by the room's alias
                await gull.join(f"#harbour:{home.server_name}")
            spam = [
                await gull1.send(room, f"cheap ferry tickets at {SPAM_CANARY} dot biz"),
                await gull2.send(room, f"the ferry is cancelled, refunds via {SPAM_CANARY}"),
            ]
            await wait_indexed(f, [kept, *spam])  # the remote messages reached the index
            assert f.stack.grep_data(SPAM_CANARY)  # the scan can see them

            acl = await mod.send_state(
                room,
                "m.room.server_acl",
                {"allow": ["*"], "deny": [REMOTE_HOST], "allow_ip_literals": True},
            )
            await gone_from_every_file(f.stack, SPAM_CANARY)
            assert [f.stack.event_status(e) for e in spam] == ["redacted", "redacted"]
            assert f.stack.event_status(kept) == "indexed"
            [line] = [e for e in journal_lines(f, "server_acl", room) if "messages" in e]
            assert line["rule"] == "server_denied" and line["messages"] == 2
            assert line["event_id"] == acl

            # The wave goes on: the bot's homeserver refuses the remote server's events
            # in the room, so nothing of them reaches the service.
            late = await gull1.send(room, f"{SPAM_CANARY} second wave, even cheaper")
            marker = await mod.send(room, "the ferry timetable is pinned in the topic")
            await wait_indexed(f, [marker])
            assert f.stack.event_status(late) is None
            seen = HttpClient(home.url, tok, timeout=30).call(
                "GET", f"/_matrix/client/v3/rooms/{quote(room)}/event/{quote(late)}"
            )
            assert seen.status == 404, seen.status  # refused by the bot's homeserver
    assert f.stack.grep_data(SPAM_CANARY) == []
    assert f.stack.event_status(kept) == "indexed"


async def test_a_remote_room_upgraded_on_its_server_is_followed_over_federation(
    federation: Federation,
):
    f, home = federation, federation.stack.synapse
    remote_name = f.remote.server_name
    local_uid, local_tok = home.register_user("tern", "tern-password")
    async with f.remote_person("uma") as uma, ChatClient(home.url, local_uid, local_tok) as tern:
        old = await uma.create_room("Release train", public=True, alias="train")
        said = await uma.send(old, "the kestrel release train leaves every tuesday at ten")
        f.stack.allowlist_add(f"{old}?via={remote_name}")
        await f.wait_joined(uma, old)
        await tern.join(f"#train:{remote_name}")  # a user of the bot's server speaks too
        local = await tern.send(old, "the kestrel hotfixes ship from the ternary branch")
        await wait_indexed(f, [said, local])

        version = newest_room_version(f.remote.url, uma.access_token)
        new = client_call(
            f.remote.url,
            uma.access_token,
            "POST",
            f"/_matrix/client/v3/rooms/{quote(old)}/upgrade",
            {"new_version": version},
        )["replacement_room"]
        early = await uma.send(new, "the kestrel release notes now live in the wiki")
        allowlist = f.stack.data_dir / "allowlist.yaml"
        await asyncio.to_thread(
            wait_for,
            "the successor listed",
            lambda: f"upgraded from {old}" in allowlist.read_text(),
        )
        # Listed with the server it was joined through (a version 12 id names none).
        assert f"{new}  via {remote_name}" in f.stack.cli("allowlist", "list").stdout
        await f.wait_joined(uma, new)  # joined over federation, through uma's server
        after = await uma.send(new, "the kestrel changelog is generated from the tags")
        await wait_indexed(f, [early, after])  # backfilled, then live
        reply = await uma.ask(new, "!sources --room here when does the kestrel train leave", f.bot)
        body = reply["content"]["body"]
        assert "every tuesday at ten" in body, body
        formatted = reply["content"]["formatted_body"]
        assert quote(said, safe="") in formatted, formatted  # cited by its own ids
        assert quote(old, safe="") in formatted, formatted
        body = (await uma.ask(new, "!sources --room here who ships kestrel hotfixes", f.bot))[
            "content"
        ]["body"]
        assert "ternary branch" in body, body  # the local user's message in the chain
    await f.wait_journal("upgrade", new, predecessor=old)
    [verdict] = journal_lines(f, "upgrade", new)
    assert verdict["accepted"] is True and verdict["predecessor"] == old, verdict


async def test_a_remote_acl_that_shuts_out_the_bots_server_withdraws_the_room(
    federation: Federation,
):
    """The remote room's moderators deny the bot's homeserver (its host, 127.0.0.1).
    The remote server still sends it the room's events (an ACL binds what a server
    accepts), but the bot is shut out: the room is handled as one it was banned from."""
    f, remote_name = federation, federation.remote.server_name
    async with f.remote_person("osprey") as osprey:
        room = await osprey.create_room("Shut out", public=True)
        said = await osprey.send(room, "the osprey-shutout-1a2 nest cam is live")
        f.stack.allowlist_add(f"{room}?via={remote_name}")
        await f.wait_joined(osprey, room)
        await wait_indexed(f, [said])
        acl = await osprey.send_state(
            room,
            "m.room.server_acl",
            {"allow": ["*"], "deny": ["127.0.0.1"], "allow_ip_literals": True},
        )
        later = await osprey.send(room, "the osprey-shutout-1a2 cam moved to the mast")
        await gone_from_every_file(f.stack, "osprey-shutout-1a2")
        await f.wait_journal("purge", room, rule="server_denied", event_id=acl)
        await f.wait_journal("refusal", room, rule="server_denied", event_id=later)
        assert f.stack.event_status(said) == "purged"
        assert f.stack.event_status(later) is None
