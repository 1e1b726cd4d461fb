"""Two Synapses federating over loopback: the bot's homeserver (a Stack: Synapse and
`matrix-sources run`) and a remote one whose people own the rooms the bot is to read.

Both are named `IP:PORT` after their TLS federation listener (self-signed, unverified),
so neither .well-known nor SRV is looked up (LocalSynapse.federating): the bot's
`127.0.0.1:PORT`, the remote `127.0.0.2:PORT` (a host of its own, for server ACLs).
A module that uses the pair imports the fixture:

    from tests.federation import Federation, federation  # noqa: F401

    async def test_x(federation: Federation): ...

One pair is started per module (about 20 s with the model loaded). The remote server's
users matching `PUPPET_PATTERN` count as bridge puppets (gate.bridge_servers names both
servers), for the gate's member checks on remote rooms.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from matrix_sources.appservice.tools.chatclient import ChatClient
from matrix_sources.appservice.tools.localsynapse import LocalSynapse
from matrix_sources.indexer.config import DEFAULT_PUPPET_PATTERNS
from tests.harness import Stack, make_stack, wait_for

PUPPET_PATTERN = "^@fedpuppet_.*"
# The remote server's host: another loopback address, so that a server ACL (which
# matches hosts, not ports) can deny the remote server and not the bot's.
REMOTE_HOST = "127.0.0.2"


@dataclass
class Federation:
    stack: Stack  # the bot's homeserver and the service
    remote: LocalSynapse  # the other homeserver

    @property
    def bot(self) -> str:
        return self.stack.bot

    @asynccontextmanager
    async def remote_person(self, localpart: str) -> AsyncIterator[ChatClient]:
        """A user of the remote server at a real client (registered on first use)."""
        try:
            user, token = self.remote.register_user(localpart, f"{localpart}-password")
        except Exception:
            user, token = self.remote.login(localpart, f"{localpart}-password")
        async with ChatClient(self.remote.url, user, token) as client:
            yield client

    async def wait_joined(self, client: ChatClient, room: str, timeout: float = 60) -> None:
        """The bot's join has reached the remote server (it sees the member event)."""
        await client.wait_for_member(room, self.bot, timeout)

    def journal_has(self, kind: str, room: str, **fields: str) -> bool:
        return any(
            e.get("kind") == kind
            and e.get("room_id") == room
            and all(e.get(k) == v for k, v in fields.items())
            for e in self.stack.journal()
        )

    async def wait_journal(self, kind: str, room: str, timeout: float = 60, **fields: str) -> None:
        what = f"a {kind} journal entry for {room}"
        await asyncio.to_thread(
            wait_for, what, lambda: self.journal_has(kind, room, **fields), timeout
        )


@pytest.fixture(scope="module")
def federation(tmp_path_factory) -> Federation:
    root = tmp_path_factory.mktemp("federation")
    remote = LocalSynapse.federating(root / "remote", host=REMOTE_HOST)
    stack = make_stack(
        root / "home",
        federating=True,
        gate={
            "puppet_patterns": [*DEFAULT_PUPPET_PATTERNS, PUPPET_PATTERN],
            "bridge_servers": [remote.server_name],
        },
    )
    remote.start()
    try:
        stack.synapse.start()
        try:
            stack.service.start()
            yield Federation(stack, remote)
        finally:
            stack.service.stop()
            stack.synapse.stop()
    finally:
        remote.stop()
