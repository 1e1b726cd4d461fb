"""Nothing lost on a crash: SIGKILL the service at several points while Synapse pushes a
few thousand messages; after restarts every accepted message is in exactly one window.
Then, with the service stopped, `matrix-sources backfill` reads history, and a second
writer is refused while the service runs."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

pytestmark = [pytest.mark.synapse, pytest.mark.model]

MESSAGES = 2000
SENDERS = 4
TOPICS = (
    "the nightly backup",
    "federation delays",
    "the bridge outage",
    "disk usage",
    "the signing key",
    "room upgrades",
    "the media repo",
    "spam waves",
)


async def test_sigkill_while_pushing_loses_nothing_and_doubles_nothing(stack):
    rng = random.Random(1)
    user, token = stack.synapse.register_user("crash", "crash-password")
    async with ChatClient(stack.synapse.url, user, token) as c:
        room = await c.create_room("Crash room", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await c.wait_for_member(room, stack.bot)
        sent: list[str] = []

        async def sender(k: int) -> None:
            for i in range(k, MESSAGES, SENDERS):
                topic = TOPICS[rng.randrange(len(TOPICS))]
                sent.append(await c.send(room, f"message {i}: an update on {topic}, take {k}"))

        async def killer() -> None:
            for at in (150, 700, 1300):  # after this many messages were accepted
                while len(sent) < at:
                    await asyncio.sleep(0.05)
                stack.service.kill()
                await asyncio.sleep(rng.uniform(0.2, 2.0))
                await asyncio.to_thread(stack.service.start)

        await asyncio.gather(killer(), *(sender(k) for k in range(SENDERS)))
    assert len(sent) == MESSAGES

    deadline = time.monotonic() + 600
    while stack.count_indexed(sent) < MESSAGES:
        assert time.monotonic() < deadline, f"{stack.count_indexed(sent)} of {MESSAGES} indexed"
        await asyncio.sleep(1)
    store = ChromaStore(path=stack.data_dir / "chroma")
    held = Counter(e for w in store.iter_windows() for e in w.event_ids if w.room_id == room)
    assert set(held) == set(sent), f"missing {len(set(sent) - set(held))}"
    assert [e for e, n in held.items() if n > 1] == []


async def test_backfill_command_and_single_writer(stack):
    user, token = stack.synapse.login("crash", "crash-password")
    async with ChatClient(stack.synapse.url, user, token) as c:
        room = await c.create_room("Quiet room", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await c.wait_for_member(room, stack.bot)
        (stack.data_dir / "nothing.jsonl").write_text("")
        busy = stack.cli("import", "-q", str(stack.data_dir / "nothing.jsonl"))
        assert busy.returncode == 1 and "in use by matrix-sources run" in busy.stderr
        stack.service.stop()
        ids = [await c.send(room, f"sent while the service was down, number {i}") for i in range(5)]
    res = stack.cli("backfill", "-q", room)
    assert res.returncode == 0, res.stderr
    assert "5 new messages" in res.stdout
    assert stack.count_indexed(ids) == 5
    stack.service.start()
