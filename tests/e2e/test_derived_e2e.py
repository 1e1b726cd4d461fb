"""The cycle the derived filter stops, end to end: real Synapse, `matrix-sources run` with
the real model, people at matrix-nio clients. The bot answers `!sources`; someone pastes
a line of that answer back into the room; the paste stays out of the index, the event
log tags it derived and the journal says which answer it came from."""

from __future__ import annotations

import json

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from tests.harness import Stack, make_stack, wait_for

pytestmark = [pytest.mark.synapse, pytest.mark.model]

CONVERSATION = [
    "morning all, the federation tester is green again after the certificate renewal",
    "To rotate the homeserver signing key: generate a new one with generate_signing_key, "
    "move the old key into old_signing_keys with an expiry, then restart synapse.",
    "and keep the old key listed for a while so other servers can still verify past events",
]
GENUINE = (
    "we rotated ours last month following that and federation kept working the "
    "whole time, only the one restart was needed"
)


@pytest.fixture(scope="module")
def derived_stack(tmp_path_factory) -> Stack:
    s = make_stack(tmp_path_factory.mktemp("derived"))
    s.synapse.start()
    try:
        s.service.start()
        yield s
    finally:
        s.service.stop()
        s.synapse.stop()


async def test_a_pasted_answer_is_not_indexed_and_the_journal_says_why(derived_stack):
    s = derived_stack
    user, token = s.synapse.register_user("dana", "dana-password")
    async with ChatClient(s.synapse.url, user, token) as dana:
        room = await dana.create_room("Homeserver admins", public=True)
        assert s.cli("allowlist", "add", room).returncode == 0
        await dana.wait_for_member(room, s.bot)
        ids = [await dana.send(room, body) for body in CONVERSATION]
        s.wait_indexed(ids)

        reply = await dana.ask(room, "!sources how do I rotate the signing key?", s.bot)
        quoted = [
            line.split(": ", 1)[1]
            for line in reply["content"]["body"].split("\n")
            if line.startswith("   > ")
        ]
        pasted = next(q for q in quoted if "generate_signing_key" in q)
        paste = await dana.send(room, f"the bot says: {pasted}")
        genuine = await dana.send(room, GENUINE)

    s.wait_indexed([genuine])  # the filter does not drop everything
    wait_for(
        f"{paste} derived",
        lambda: s.event_status(paste) == "derived",
        every=0.2,
        shows=lambda: s.event_status(paste),
    )
    assert all(s.event_status(e) == "indexed" for e in ids)  # the originals stay evidence

    journal = (s.data_dir / "journal.jsonl").read_text()
    [entry] = [
        e
        for e in map(json.loads, journal.splitlines())
        if e.get("kind") == "derived_excluded" and e.get("event_id") == paste
    ]
    assert entry["room_id"] == room and entry["artifact_kind"] == "answer"
    assert entry["artifact"].startswith(f"answer:{reply['event_id']}#")
    assert entry["threshold"] == 0.8 and entry["threshold"] <= entry["score"] <= 1
    assert "generate_signing_key" not in journal  # ids and figures, never text
    metrics = s.http("/metrics")[1]
    assert 'matrix_sources_derived_exclusions_total{kind="answer"} 1.0' in metrics

    search = s.cli("search", "--json", "--top", "20", pasted)
    assert search.returncode == 0, search.stderr
    found = {e for h in json.loads(search.stdout)["hits"] for e in h["event_ids"]}
    assert ids[1] in found and paste not in found

    verify = s.cli("verify", "--derived-filter", "--exclusions")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "derived-filter: ok" in verify.stdout and paste in verify.stdout
