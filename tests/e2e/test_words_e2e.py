"""Issue 51 through a real Synapse: the demo conversation, sent the way
`matrix-sources demo` sends it (replies mention whom they answer), a few more messages of
a tester's, a few questions asked; then two words from two different lines of one window,
and "phones onboarding" (carol's question and her reply two lines on, which the live
chunker cuts into two windows), each get hits, in the room and from the shell (the CLI
through the running service's API), never "nothing matches"."""

from __future__ import annotations

import json
import re

import pytest

from matrix_sources.appservice.bot.replies import NOTHING_MATCHES
from matrix_sources.appservice.tools.chatclient import ChatClient
from matrix_sources.appservice.tools.demo import CONVERSATION

pytestmark = [pytest.mark.synapse, pytest.mark.model]

EXTRA = [
    "hi all, I just joined to try the search bot",
    "does anyone have a good guide for the bridges?",
    "never mind, found the docs",
]
ASKED = ["who hosts the meetup", "media retention", "signing key", "compressor"]


async def test_words_of_one_window_are_never_refused_in_a_live_demo_room(stack):
    people = {
        n: stack.synapse.register_user(n, f"{n}-password")
        for n in ("alice", "bob", "carol", "tess")
    }
    clients = {n: ChatClient(stack.synapse.url, uid, tok) for n, (uid, tok) in people.items()}
    for c in clients.values():
        await c.__aenter__()
    try:
        alice, tess = clients["alice"], clients["tess"]
        room = await alice.create_room("Demo", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await alice.wait_for_member(room, stack.bot)
        for name, c in clients.items():
            if name != "alice":
                await c.join(room)
        ids: list[str] = []
        for who, body, to in CONVERSATION:
            content: dict = {"msgtype": "m.text", "body": body}
            if to is not None:
                content["m.relates_to"] = {"m.in_reply_to": {"event_id": ids[to]}}
                content["m.mentions"] = {"user_ids": [people[CONVERSATION[to][0]][0]]}
            ids.append(await clients[who].send(room, body, content))
        ids += [await tess.send(room, body) for body in EXTRA]
        stack.wait_indexed(ids)
        for q in ASKED:  # the state a tester leaves: questions asked, answered
            reply = await tess.ask(room, f"!sources {q}", stack.bot)
            assert reply["content"]["body"] != NOTHING_MATCHES, q

        # Two words from two different lines of one window: "vault" (bob's backup line)
        # and a word of another line of the window the shell finds it in.
        res = stack.cli("search", "--json", "vault")
        assert res.returncode == 0, res.stderr
        first = json.loads(res.stdout)["hits"][0]
        lines = [b for _, b, _ in CONVERSATION if b in first["text"] and "vault" not in b]
        assert lines, first["text"]
        other = max(re.findall(r"[a-z]{5,}", lines[-1].lower()), key=len)
        for words in (f"vault {other}", "phones onboarding"):
            reply = await alice.ask(room, f"!sources {words}", stack.bot)
            assert reply["content"]["body"] != NOTHING_MATCHES, words
            res = stack.cli("search", "--json", words)
            assert res.returncode == 0 and json.loads(res.stdout)["hits"], (words, res.stderr)
    finally:
        for c in clients.values():
            await c.__aexit__(None, None, None)
