"""Live ingest to cited answers, end to end: real Synapse, real service, real model,
people at matrix-nio clients."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from html import escape
from urllib.parse import quote

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient

pytestmark = [pytest.mark.synapse, pytest.mark.model]

CONVERSATION = [
    "morning all, the federation tester is green again",
    "To rotate the homeserver signing key: generate a new one with generate_signing_key, "
    "move the old key into old_signing_keys with an expiry, then restart synapse.",
    "thanks, and remember to keep the old key listed so other servers can verify past events",
    "unrelated, but the bridge to the old forum goes down on friday for maintenance",
]
CANARY_OUTSIDE = "zebracanary-private-room-7781"


def _put_txn(stack, txn_id: str, events: list[dict], token: str | None) -> int:
    url = f"http://127.0.0.1:{stack.service.port}/_matrix/app/v1/transactions/{txn_id}"
    req = urllib.request.Request(
        url,
        data=json.dumps({"events": events}).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def test_paraphrase_query_cites_the_message(stack):
    user, token = stack.synapse.register_user("alice", "alice-password")
    async with ChatClient(stack.synapse.url, user, token) as alice:
        room = await alice.create_room("Homeserver admins", public=True)
        added = stack.cli("allowlist", "add", room)
        assert added.returncode == 0, added.stderr
        await alice.wait_for_member(room, stack.bot)  # hot reload joined the bot

        # A private room the bot is invited into: queries answered there, nothing stored.
        private = await alice.create_room("Private chat", public=False, invite=(stack.bot,))
        await alice.wait_for_member(private, stack.bot)
        await alice.send(private, f"the secret plan is {CANARY_OUTSIDE}")

        ids = [await alice.send(room, body) for body in CONVERSATION]
        stack.wait_indexed(ids)

        reply = await alice.ask(
            room, "!sources how do I change the server's signing key?", stack.bot
        )
        content = reply["content"]
        assert content["msgtype"] == "m.notice"
        assert quote(ids[1], safe="") in content["formatted_body"]  # the line's own link
        assert "via=localhost" in content["body"]  # the window's, in plain text

        # Asked from the private room: answered from memory, the room leaves no trace.
        reply = await alice.ask(private, "!sources signing key rotation", stack.bot)
        assert quote(ids[1], safe="") in reply["content"]["formatted_body"]

    assert stack.grep_data(CANARY_OUTSIDE) == []
    assert CANARY_OUTSIDE not in stack.service.log_path.read_text(errors="replace")
    search = stack.cli("search", "--json", CANARY_OUTSIDE)
    assert search.returncode == 0, search.stderr
    assert CANARY_OUTSIDE not in search.stdout


async def test_transactions_replayed_once_across_restart(stack):
    user, token = stack.synapse.register_user("bob", "bob-password")
    async with ChatClient(stack.synapse.url, user, token) as bob:
        room = await bob.create_room("Replay room", public=True)
        stack.allowlist_add(room)  # the events below are pushed, not sent: no backfill
        await bob.wait_for_member(room, stack.bot)
    event = {
        "type": "m.room.message",
        "room_id": room,
        "sender": user,
        "event_id": "$replayed-event-1",
        "origin_server_ts": 1_700_000_000_000,
        "content": {"msgtype": "m.text", "body": "a message pushed twice"},
    }
    assert _put_txn(stack, "replay-1", [event], None) == 401
    assert _put_txn(stack, "replay-1", [event], "wrong-token") == 403
    assert stack.event_status("$replayed-event-1") is None  # refused requests store nothing

    # An encrypted event in a listed room is refused with one journal line per processing.
    encrypted = {
        "type": "m.room.encrypted",
        "room_id": room,
        "sender": user,
        "event_id": "$replayed-encrypted",
        "origin_server_ts": 1_700_000_000_001,
        "content": {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AAAA"},
    }

    def journal_lines() -> int:
        return (stack.data_dir / "journal.jsonl").read_text().count("$replayed-encrypted")

    assert _put_txn(stack, "replay-1", [event, encrypted], stack.hs_token) == 200
    stack.wait_indexed(["$replayed-event-1"])
    assert journal_lines() == 1
    assert _put_txn(stack, "replay-1", [event, encrypted], stack.hs_token) == 200
    stack.service.stop()
    stack.service.start()
    assert _put_txn(stack, "replay-1", [event, encrypted], stack.hs_token) == 200
    assert journal_lines() == 1  # retried twice, processed once
    # Synapse on SQLite reuses transaction ids after it restarts: the same id with other
    # events is a new transaction, and its messages must not be dropped.
    reused = dict(event, event_id="$reused-id-event", origin_server_ts=1_700_000_000_002)
    assert _put_txn(stack, "replay-1", [reused], stack.hs_token) == 200
    stack.wait_indexed(["$reused-id-event"])

    # Malformed bodies get 400, odd events are skipped without a crash.
    url = f"http://127.0.0.1:{stack.service.port}/_matrix/app/v1/transactions/bad-1"
    req = urllib.request.Request(
        url, data=b"{not json", method="PUT", headers={"Authorization": f"Bearer {stack.hs_token}"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 400
    odd = [
        {
            "type": "m.room.message",
            "room_id": room,
            "sender": user,
            "event_id": "$odd-1",
            "origin_server_ts": 1,
            "content": {"msgtype": "m.text", "body": 42},
        },
        {
            "type": "m.room.message",
            "room_id": room,
            "sender": user,
            "event_id": "$odd-2",
            "origin_server_ts": 1,
            "content": {"msgtype": "m.text"},
        },
        {
            "type": "org.example.unknown",
            "room_id": room,
            "sender": user,
            "event_id": "$odd-3",
            "origin_server_ts": 1,
            "content": {},
        },
        {
            "type": "m.room.message",
            "room_id": room,
            "sender": user,
            "event_id": "$odd-4",
            "origin_server_ts": 1,
            "content": {"msgtype": "m.text", "body": "x" * 70000},
        },
        "not an event",
        None,
    ]
    assert _put_txn(stack, "odd-1", odd, stack.hs_token) == 200
    assert all(stack.event_status(f"$odd-{i}") is None for i in range(1, 5))
    assert stack.service.proc.poll() is None


HOSTILE = [
    "try <script>alert('xss')</script> in the topic and the widget breaks",
    'the docs link is <a href="javascript:alert(1)">here</a> for the widget config',
    "widget preview shows <img src=x onerror=alert(2)> instead of the image",
    'ping <a href="https://matrix.to/#/@alice:localhost">Alice</a> about the widget',
]


async def test_two_line_query_is_fused_and_explained_and_html_escaped(stack):
    user, token = stack.synapse.register_user("carol", "carol-password")
    async with ChatClient(stack.synapse.url, user, token) as carol:
        room = await carol.create_room("Widgets", public=True, alias="widgets")
        assert stack.cli("allowlist", "add", room).returncode == 0
        await carol.wait_for_member(room, stack.bot)
        ids = [await carol.send(room, body) for body in HOSTILE]
        stack.wait_indexed(ids)

        reply = await carol.ask(
            room,
            "!sources --room #widgets:localhost --top 3\n"
            "the widget breaks with a script in the topic\nwidget image preview broken",
            stack.bot,
        )
        content = reply["content"]
        assert "(+1 more)" in content["body"]  # both lines were taken as query texts
        assert quote(ids[0], safe="") in content["formatted_body"]
        html = content["formatted_body"]
        for raw in ("<script", "<img", 'href="javascript:', "onerror=alert(2)>"):
            assert raw not in html
        # Every hostile line the hit quotes (it quotes its conversation's lines, not all
        # four) is in the HTML escaped, as written.
        quoted = [b for b in HOSTILE if b in content["body"]]
        assert len(quoted) >= 2, content["body"]
        assert all(escape(b) in html for b in quoted), html

        why = (await carol.ask(room, "!sources why 1", stack.bot))["content"]["body"]
        assert why.startswith("Hit 1:")
        assert "text 1" in why and "text 2" in why and "cosine similarity" in why
        assert "score = 1/(60+" in why
