"""Faithful history on a real Synapse: backfill, edits, redactions, and the bot's own
replies edited when a message they quoted is redacted."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from matrix_sources.indexer.store.eventlog.db import reader
from tests.harness import wait_for
from tests.vectorscan import files_holding

pytestmark = [pytest.mark.synapse, pytest.mark.model]


def search(stack, *texts: str) -> list[dict]:
    res = stack.cli("search", "--json", "--top", "10", *texts)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["hits"]


def log_body(stack, event_id: str):
    with reader(stack.database) as db:
        row = db.execute(
            "SELECT status, body FROM events WHERE event_id = ?", (event_id,)
        ).fetchone()
    return tuple(row) if row else None


async def test_backfill_edit_and_redaction(stack):
    user, token = stack.synapse.register_user("dora", "dora-password")
    async with ChatClient(stack.synapse.url, user, token) as dora:
        room = await dora.create_room("History", public=True)
        before = [
            await dora.send(room, f"early message {i} about the kernel upgrade") for i in range(3)
        ]
        assert stack.cli("allowlist", "add", room).returncode == 0
        await dora.wait_for_member(room, stack.bot)
        stack.wait_indexed(before)  # sent before the bot joined: found by backfill

        meeting = await dora.send(room, "the community meeting is on tuesday at noon")
        stack.wait_indexed([meeting])
        await dora.send(
            room,
            "* the community meeting is on thursday at noon",
            content={
                "msgtype": "m.text",
                "body": "* the community meeting is on thursday at noon",
                "m.new_content": {
                    "msgtype": "m.text",
                    "body": "the community meeting is on thursday at noon",
                },
                "m.relates_to": {"rel_type": "m.replace", "event_id": meeting},
            },
        )
        wait_for(
            "the edit in the event log",
            lambda: "thursday" in (log_body(stack, meeting) or ("", ""))[1],
        )

        def edited_in_store():
            hits = [h for h in search(stack, "community meeting") if meeting in h["event_ids"]]
            return hits and "thursday" in hits[0]["text"] and "tuesday" not in hits[0]["text"]

        wait_for("the edited window", edited_in_store)

        canary = await dora.send(room, "the admin password hint is zebra-canary-5521 do not share")
        stack.wait_indexed([canary])
        reply = await dora.ask(room, "!sources admin password hint", stack.bot)
        assert "zebra-canary-5521" in reply["content"]["body"]
        # The vector of the window that holds it, read before the redaction: made from
        # the message, so as private as its text (embeddings can be inverted).
        [holding] = [
            h["window_id"]
            for h in search(stack, "admin password hint zebra")
            if canary in h["event_ids"]
        ]
        vector = stack.stored_vectors([holding])[holding]
        assert files_holding(stack.data_dir / "chroma", vector)  # the check can see it
        await dora._client.room_redact(room, canary, reason="oops")

        wait_for(
            "the redaction in the event log", lambda: log_body(stack, canary) == ("redacted", None)
        )
        wait_for(
            "the redaction in the store",
            lambda: all(
                "zebra-canary-5521" not in h["text"]
                for h in search(stack, "admin password hint zebra")
            ),
        )
        # Not in any file either: Chroma never held it, the event log zeroed it
        # (secure_delete) and its WAL is checkpointed, and the answer artifacts hold
        # only hashes.
        wait_for(
            "the redacted text gone from every file in the data dir",
            lambda: not stack.grep_data("zebra-canary-5521"),
        )
        # Nor its vector: the compaction within the compaction interval copied the live
        # points into a fresh collection and dropped the old one's files.
        wait_for(
            "the redacted window's vector gone from every file in the data dir",
            lambda: files_holding(stack.data_dir, vector) == {},
            timeout=30,
        )

        async def reply_edit():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for ev in dora.timeline:
                    rel = (ev.get("content") or {}).get("m.relates_to") or {}
                    if (
                        ev.get("sender") == stack.bot
                        and rel.get("rel_type") == "m.replace"
                        and rel.get("event_id") == reply["event_id"]
                    ):
                        return ev
                await dora.sync_once()
            raise AssertionError("the bot did not edit its reply")

        edit = await reply_edit()
        new = edit["content"]["m.new_content"]
        assert "zebra-canary-5521" not in new["body"]
        assert "zebra-canary-5521" not in new["formatted_body"]
        assert new["body"].startswith(
            "Sources for: admin password hint (edited: a message quoted here was deleted)"
        )
    await asyncio.sleep(0)
