"""Server ACLs and polls through a real Synapse (issue 46).

One Synapse holds one server, and Synapse refuses an ACL that denies itself; so the spam
wave's senders (`@spam:evil.example`) reach the service as a federated server's events do,
in an appservice transaction, while the room, its people, the question, the moderator's
`m.room.server_acl` and the bot's answer are all real Synapse's."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from tests.e2e.test_e2e import _put_txn
from tests.harness import gone_from_every_file, wait_for

pytestmark = [pytest.mark.synapse, pytest.mark.model]

SPAM_CANARY = "spamcanary-77e1"


def pushed(room: str, sender: str, n: int, body: str) -> dict:
    return {
        "type": "m.room.message",
        "room_id": room,
        "sender": sender,
        "event_id": f"$acl-e2e-{n}",
        "origin_server_ts": int(time.time() * 1000) + n,
        "content": {"msgtype": "m.text", "body": body},
    }


async def bot_edit_of(client: ChatClient, bot: str, reply_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in client.timeline:
            rel = (ev.get("content") or {}).get("m.relates_to") or {}
            if (
                ev.get("sender") == bot
                and rel.get("rel_type") == "m.replace"
                and rel.get("event_id") == reply_id
            ):
                return ev
        await client.sync_once()
    raise AssertionError("the bot did not edit its answer")


async def test_a_spam_wave_leaves_every_file_when_the_moderators_deny_its_server(stack):
    user, token = stack.synapse.register_user("moda", "moda-password")
    async with ChatClient(stack.synapse.url, user, token) as moda:
        room = await moda.create_room("Certificates", public=True)
        stack.allowlist_add(room)
        await moda.wait_for_member(room, stack.bot)
        asked = await moda.send(room, "how do we renew the TLS certificate on the proxy?")
        spam = pushed(
            room,
            "@spam:evil.example",
            1,
            f"renew the TLS certificate on the proxy with {SPAM_CANARY} from cheap-certs dot biz",
        )
        friend = pushed(
            room, "@friend:notevil.example", 2, "renew it with certbot renew, then reload nginx"
        )
        assert _put_txn(stack, "acl-wave-1", [spam, friend], stack.hs_token) == 200
        stack.wait_indexed([asked, spam["event_id"], friend["event_id"]])
        vector = stack.vector_of(spam["event_id"])
        reply = await moda.ask(room, "!sources renew the TLS certificate cheap certs", stack.bot)
        assert quote(spam["event_id"], safe="") in reply["content"]["formatted_body"]

        acl_id = await moda.send_state(
            room,
            "m.room.server_acl",
            {"allow": ["*"], "deny": ["evil.example", 42], "allow_ip_literals": False},
        )
        await gone_from_every_file(stack, SPAM_CANARY, vector)
        assert stack.event_status(spam["event_id"]) == "redacted"
        assert stack.event_status(friend["event_id"]) == "indexed"  # merely ends the same
        [line] = [e for e in stack.journal() if e["kind"] == "server_acl" and "messages" in e]
        assert line["rule"] == "server_denied" and line["messages"] == 1
        assert line["event_id"] == acl_id and line["room_id"] == room
        assert any(  # the malformed entry named, the rest obeyed
            "deny[1] is not a string" in e.get("detail", "")
            for e in stack.journal()
            if e["kind"] == "server_acl"
        )
        edit = await bot_edit_of(moda, stack.bot, reply["event_id"])
        new = json.dumps(edit["content"]["m.new_content"])
        assert SPAM_CANARY not in new and quote(spam["event_id"], safe="") not in new

        # Read again (Synapse's retry, a backfill) and a new message of the wave: refused.
        again = pushed(room, "@spam:evil.example", 3, f"{SPAM_CANARY} second wave")
        assert _put_txn(stack, "acl-wave-2", [spam, again], stack.hs_token) == 200
        marker = await moda.send(room, "the certificate renewal is documented now")
        stack.wait_indexed([marker])
        assert stack.event_status(spam["event_id"]) == "redacted"
        assert stack.event_status(again["event_id"]) is None
        assert any(
            e["kind"] == "refusal"
            and e["rule"] == "server_denied"
            and e["event_id"] == again["event_id"]
            for e in stack.journal()
        )

    # An import of the wave, the service stopped: the withdrawn message does not come back.
    stack.service.stop()
    try:
        dump = stack.root / "wave.jsonl"
        state = {
            "type": "m.room.join_rules",
            "room_id": room,
            "sender": user,
            "state_key": "",
            "event_id": "$acl-e2e-jr",
            "origin_server_ts": spam["origin_server_ts"] - 1,
            "content": {"join_rule": "public"},
        }
        dump.write_text("\n".join(json.dumps(e) for e in (state, spam)) + "\n")
        done = stack.cli("import", str(dump), "--quiet")
        assert done.returncode == 0, done.stderr
        assert stack.event_status(spam["event_id"]) == "redacted"
        assert stack.grep_data(SPAM_CANARY) == []
    finally:
        stack.service.start()


async def test_a_poll_is_found_and_cited_votes_are_never_stored(stack):
    user, token = stack.synapse.register_user("polly", "polly-password")
    async with ChatClient(stack.synapse.url, user, token) as polly:
        room = await polly.create_room("Polls", public=True)
        stack.allowlist_add(room)
        await polly.wait_for_member(room, stack.bot)
        question = "Which database should the Matrix bridge store its state in?"
        poll = await polly.send_event(
            room,
            "m.poll.start",
            {
                "m.poll": {
                    "kind": "m.disclosed",
                    "max_selections": 1,
                    "question": {"m.text": [{"body": question}]},
                    "answers": [
                        {"m.id": "pg", "m.text": [{"body": "PostgreSQL"}]},
                        {"m.id": "sqlite", "m.text": [{"body": "SQLite"}]},
                    ],
                },
                "m.text": [{"body": f"{question}\n1. PostgreSQL\n2. SQLite"}],
            },
        )
        unstable = await polly.send_event(
            room,
            "org.matrix.msc3381.poll.start",
            {
                "org.matrix.msc3381.poll.start": {
                    "kind": "org.matrix.msc3381.poll.disclosed",
                    "max_selections": 1,
                    "question": {
                        "org.matrix.msc1767.text": "Which weekday suits the sprint demo-4410x?"
                    },
                    "answers": [
                        {"id": "tue", "org.matrix.msc1767.text": "Tuesday"},
                        {"id": "thu", "org.matrix.msc1767.text": "Thursday"},
                    ],
                },
                "org.matrix.msc1767.text": "Which weekday suits the sprint demo?",
            },
        )
        vote = await polly.send_event(
            room,
            "m.poll.response",
            {"m.relates_to": {"rel_type": "m.reference", "event_id": poll}, "m.selections": ["pg"]},
        )
        end = await polly.send_event(
            room,
            "m.poll.end",
            {
                "m.relates_to": {"rel_type": "m.reference", "event_id": poll},
                "m.text": [{"body": "The poll has ended. Top answer: PostgreSQL pollendcanary-19"}],
            },
        )
        stack.wait_indexed([poll, unstable])
        reply = await polly.ask(room, "!sources what database for the bridge's state?", stack.bot)
        assert quote(poll, safe="") in reply["content"]["formatted_body"]
        reply = await polly.ask(room, "!sources when is the sprint demo", stack.bot)
        assert quote(unstable, safe="") in reply["content"]["formatted_body"]

        # Edited, the poll reads anew; redacted, it leaves every file.
        edited = {
            "m.poll": {
                "kind": "m.disclosed",
                "question": {"m.text": [{"body": "Which message queue should the bridge use?"}]},
                "answers": [{"m.id": "nats", "m.text": [{"body": "NATS"}]}],
            },
            "m.text": [{"body": "Which message queue should the bridge use?\n1. NATS"}],
        }
        await polly.send_event(
            room,
            "m.poll.start",
            {
                **edited,
                "m.new_content": edited,
                "m.relates_to": {"rel_type": "m.replace", "event_id": poll},
            },
        )
        await polly._client.room_redact(room, unstable)
        await gone_from_every_file(stack, "demo-4410x")

        def poll_text() -> str:
            res = stack.cli("search", "--json", "--room", room, "message queue for the bridge")
            assert res.returncode == 0, res.stderr
            return json.dumps(json.loads(res.stdout)["hits"])

        wait_for("the poll's edit in the index", lambda: "NATS" in poll_text(), 30, 0.5)
    assert stack.event_status(vote) is None and stack.event_status(end) is None
    assert stack.grep_data("pollendcanary-19") == []
