"""Display names through a real Synapse (issue 44): a member who takes a name that
another's starts with must not take the answers meant for that other.

In a busy public room Danielle asks; Mallory, in the room as "Mallory", takes the room
display name `Dani` (or `Da\\u200bni`: a zero-width space inside) and posts a copy of
Danielle's question with a link; Bob answers "dani: ...". Before, the whole fit won:
Bob's answer was stored as a mention of Mallory, and `!sources` showed her copy, link
and all, as hit 1 with Bob's answer under it.
"""

from __future__ import annotations

import re

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient

pytestmark = [pytest.mark.synapse, pytest.mark.model]

# (the name taken, Danielle's question, Bob's answer, the chat meanwhile, the question
# asked of the bot). Each case its own words: text the bot quoted never comes back in as
# evidence (the derived filter), and the module's cases share one Synapse and index.
CASES = [
    (
        "Dani",
        "How can we keep the uploaded media on Amazon S3 instead of the local disk? Ours is "
        "nearly full.",
        "install synapse-s3-storage-provider and list it under media_storage_providers; "
        "s3_media_upload moves the old files",
        [
            ("carol", "dave: is the meetup still on Friday evening?"),
            ("dave", "carol: yes, seven o'clock at the library annex"),
            ("carol", "dave: great, I will bring the projector"),
        ],
        "can the files people upload go to cloud storage rather than the server disk?",
    ),
    (
        "Da\u200bni",
        "Why does our homeserver never send the password reset emails? Nothing arrives at all.",
        "fill in email.smtp_host, smtp_port and notif_from in homeserver.yaml, then restart; "
        "the relay rejects mail without a from address",
        [
            ("carol", "dave: did the sticker pack upload work in the end?"),
            ("dave", "carol: it did, after resizing them to 512 pixels"),
            ("carol", "dave: nice, the cats look great"),
        ],
        "which settings make the server's account recovery mails get delivered?",
    ),
]
LINK = "https://free-guide.example/download"


def sections(body: str) -> list[str]:
    """The reply's hits, one plain-text section each ("1. room · time · senders" on)."""
    out: list[str] = []
    for line in body.split("\n"):
        if re.match(r"^\d+\. ", line):
            out.append(line)
        elif out:
            out[-1] += "\n" + line
    return out


@pytest.mark.parametrize("taken, question, answer, chatter, ask", CASES, ids=["Dani", "zero-width"])
async def test_a_name_taken_after_a_question_does_not_take_its_answer(
    stack, taken, question, answer, chatter, ask
):
    n = len(taken)  # one set of users per case: the module shares one Synapse
    people = {
        p: stack.synapse.register_user(f"{p}{n}x", f"{p}-password")
        for p in ("k7d2n", "z9q4m", "b0b3v", "carol", "dave")
    }
    names = {
        "k7d2n": "Danielle",
        "z9q4m": "Mallory",
        "b0b3v": "Bob",
        "carol": "Carol",
        "dave": "Dave",
    }
    clients = {p: ChatClient(stack.synapse.url, uid, tok) for p, (uid, tok) in people.items()}
    for p, c in clients.items():
        await c.__aenter__()
        await c.set_displayname(names[p])  # before joining: the join carries it
    d, m, b = clients["k7d2n"], clients["z9q4m"], clients["b0b3v"]
    try:
        room = await d.create_room(f"Media {n}", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await d.wait_for_member(room, stack.bot)
        for c in clients.values():
            if c is not d:
                await c.join(room)
        ids = [await d.send(room, question)]
        ids += [await clients[p].send(room, text) for p, text in chatter]
        # Mallory takes the name after the question, in this room only.
        await m.send_state(
            room,
            "m.room.member",
            {"membership": "join", "displayname": taken},
            state_key=people["z9q4m"][0],
        )
        ids.append(await m.send(room, f"{question} {LINK}"))
        ids.append(await b.send(room, f"dani: {answer}"))
        stack.wait_indexed(ids, timeout=60)
        reply = await b.ask(room, f"!sources {ask}", stack.bot)
        body = reply["content"]["body"]
        hits = sections(body)
        assert hits, body
        for hit in hits:
            assert not (LINK in hit and answer in hit), (
                f"Mallory's copy carries Bob's answer to Danielle:\n{body}"
            )
        [answered] = [h for h in hits if answer in h]
        assert question in answered and LINK not in answered, body
    finally:
        for c in clients.values():
            await c.__aexit__(None, None, None)
