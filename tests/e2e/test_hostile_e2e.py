"""Hostile but legal traffic through a real Synapse: where the finding is about what
Synapse sends (issue 15)."""

from __future__ import annotations

import re
import signal

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient

pytestmark = [pytest.mark.synapse, pytest.mark.model]


async def test_25_messages_of_45_kb_batched_by_synapse_are_stored(stack):
    """Synapse batches what queued while a transaction was in flight (up to 100 events)
    into one transaction: 24 x 45 KB is over aiohttp's default 1 MiB body limit, which
    answered 413 forever; delivery stopped for good, `!sources` too."""
    user, token = stack.synapse.register_user("heidi", "heidi-password")
    async with ChatClient(stack.synapse.url, user, token) as heidi:
        room = await heidi.create_room("Big pastes", public=True)
        assert stack.cli("allowlist", "add", room).returncode == 0
        await heidi.wait_for_member(room, stack.bot)
        # Frozen, the service holds Synapse's first transaction open: everything sent
        # meanwhile queues in Synapse and goes out in the next one.
        stack.service.proc.send_signal(signal.SIGSTOP)
        try:
            ids = [await heidi.send(room, f"paste {i}: " + "logline " * 5_700) for i in range(25)]
        finally:
            stack.service.proc.send_signal(signal.SIGCONT)
        later = await heidi.send(room, "a short message after the pastes")
        stack.wait_indexed(ids + [later], timeout=180)
        reply = await heidi.ask(room, "!sources short message after the pastes", stack.bot)
        assert reply["content"]["m.mentions"] == {}

    log = stack.service.log_path.read_text(errors="replace")
    sizes = [int(n) for n in re.findall(r" transaction txn=\S+ events=(\d+)", log)]
    assert max(sizes) >= 24, sizes  # one transaction over 1 MiB did arrive, and was stored
    assert " 413" not in log and "M_TOO_LARGE" not in log
