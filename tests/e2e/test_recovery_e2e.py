"""Restarts and a lost Chroma folder, for real: Synapse, `matrix-sources run` with the
real model, a person at a matrix-nio client. The bot's own answers never count as
refusals, however often the service restarts (backfill reads them again), and a start
with the Chroma folder gone rebuilds every window from the event log."""

from __future__ import annotations

import re
import shutil

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient

pytestmark = [pytest.mark.synapse, pytest.mark.model]

TOPICS = [
    "rotating the signing key",
    "the media cache filling the disk",
    "federation over .well-known",
    "vacuuming the database",
    "onboarding from phones",
]


def doctor_index(stack) -> str:
    """doctor's line about the collection against the event log (service stopped)."""
    out = stack.cli("doctor").stdout
    return next(line for line in out.splitlines() if " index: " in line)


async def test_restarts_and_a_lost_chroma_folder(stack):
    user, token = stack.synapse.register_user("rita", "rita-password")
    async with ChatClient(stack.synapse.url, user, token) as rita:
        room = await rita.create_room("Recovery room", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await rita.wait_for_member(room, stack.bot)
        ids = [
            await rita.send(room, f"note {i}: what we found about {TOPICS[i % 5]}, part {i // 5}")
            for i in range(40)
        ]
        stack.wait_indexed(ids)
        await rita.ask(room, "!sources how do we vacuum the database", stack.bot)
        first = (await rita.ask(room, "!sources status", stack.bot))["content"]["body"]
    assert re.search(r"Recovery room: 40 messages .* 0 refusals", first), first

    stack.service.stop()
    healthy = doctor_index(stack)
    windows = int(re.search(r"the event log has (\d+) indexed windows", healthy).group(1))
    assert healthy.startswith("ok") and f"the collection {windows} chat windows" in healthy
    shutil.rmtree(stack.data_dir / "chroma")
    assert doctor_index(stack).startswith("FAIL")

    stack.service.start()  # ready once the collection is rebuilt
    async with ChatClient(stack.synapse.url, user, token) as rita:
        again = (await rita.ask(room, "!sources status", stack.bot))["content"]["body"]
        answer = (await rita.ask(room, "!sources the media cache filled the disk", stack.bot))[
            "content"
        ]["body"]
    assert re.search(r"Recovery room: 40 messages .* 0 refusals", again), again
    assert "media cache" in answer
    stack.service.stop()
    assert doctor_index(stack) == healthy
    stack.service.start()


async def test_what_synapse_held_back_arrives_at_the_restart_not_after_its_backoff(stack):
    """Messages sent while the service is down: Synapse retries their transaction with
    a backoff that doubles up to 8.5 minutes. The service asks the homeserver to ping it
    once it takes transactions again (MSC2659); Synapse's ping reaching it makes Synapse
    retry at once (its appservice_ping handler calls the recoverer's force_retry)."""
    import asyncio
    import re
    import time

    user, token = stack.synapse.register_user("held", "held-password")
    async with ChatClient(stack.synapse.url, user, token) as c:
        room = await c.create_room("Held-back room", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await c.wait_for_member(room, stack.bot)
        stack.service.kill()
        held = [await c.send(room, f"sent while the service was down, {i}") for i in range(3)]
        await asyncio.sleep(15)  # Synapse fails to deliver them, backing off
        stack.service.start()
        ready = time.monotonic()
        while stack.count_indexed(held) < len(held):
            assert time.monotonic() - ready < 30, "not delivered after the restart"
            await asyncio.sleep(0.5)
    log = (stack.root / "service.log").read_text()
    # Synapse's ping came in with the id the service sent: the round trip that
    # resets Synapse's backoff.
    assert re.search(
        r"appservice\.homeserver\.transactions ping txn=matrix-sources-start-\d+", log
    ), "no ping from the homeserver"
