"""Embedding workers through a real Synapse (issue 25): the service with
`index.pipeline: external`, its event log on PostgreSQL, Chroma as a server, and two
`matrix-sources worker` processes. Messages are pushed into three rooms while a worker
is SIGKILLed at random points three times (and started again); afterwards every
message is in exactly one window, and nothing is lost."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.tools.chatclient import ChatClient
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.harness import make_stack
from tests.pgkit import fresh_schema

pytestmark = [pytest.mark.synapse, pytest.mark.model]

ROOMS = 3
MESSAGES = 600  # in all, spread over the rooms
LEASE = 3  # seconds: a killed worker's rooms are taken over this soon


class WorkerProcess:
    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "matrix_sources.appservice.cli.main",
                "worker",
                "-c",
                str(self.config),
            ],
            stdout=out,
            stderr=out,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
        )
        out.close()

    def loads(self) -> int:
        """How many of its starts got as far as loading the model."""
        return (
            self.log.read_text(errors="replace").count("loading the model")
            if self.log.exists()
            else 0
        )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@pytest.fixture(scope="module")
def workers_stack(tmp_path_factory, chroma_server):
    with fresh_schema("workers") as dsn:
        root = tmp_path_factory.mktemp("workers")
        stack = make_stack(root)
        y = YAML()
        cfg = y.load(stack.config.read_text())
        cfg["store"]["database"] = dsn
        cfg["index"]["pipeline"] = "external"
        cfg["index"]["claim_lease_seconds"] = LEASE
        cfg["index"]["chroma"]["mode"] = "server"
        cfg["index"]["chroma"]["host"] = "127.0.0.1"
        cfg["index"]["chroma"]["port"] = chroma_server.port
        with open(stack.config, "w") as f:
            y.dump(cfg, f)
        stack.database = dsn
        workers = [WorkerProcess(stack.config, root / f"worker{i}.log") for i in range(2)]
        stack.synapse.start()
        try:
            stack.service.start()
            for w in workers:
                w.start()
            yield stack, workers, chroma_server
        finally:
            for w in workers:
                w.stop()
            stack.service.stop()
            stack.synapse.stop()


async def test_two_workers_one_killed_three_times_lose_nothing_and_double_nothing(workers_stack):
    stack, workers, server = workers_stack
    rng = random.Random(25)
    user, token = stack.synapse.register_user("workers", "workers-password")
    async with ChatClient(stack.synapse.url, user, token) as c:
        rooms = []
        for i in range(ROOMS):
            room = await c.create_room(f"Workers room {i}", public=True)
            stack.allowlist_add(room)
            await c.wait_for_member(room, stack.bot)
            rooms.append(room)
        sent: list[str] = []

        async def sender(k: int) -> None:
            for i in range(k, MESSAGES, ROOMS):
                sent.append(
                    await c.send(
                        rooms[k],
                        f"message {i} in room {k}: about the {('backup', 'bridge', 'disk')[i % 3]}",
                    )
                )

        async def loaded(w: WorkerProcess, past: int) -> None:
            # A kill lands on a worker that got as far as its model (on a loaded machine
            # a start takes seconds: a kill before it would count no load).
            started = time.monotonic()
            while w.loads() <= past:
                assert time.monotonic() < started + 120, "a worker never loaded its model"
                await asyncio.sleep(0.1)

        async def killer() -> None:
            for w in workers:
                await loaded(w, 0)
            for at in sorted(rng.sample(range(60, MESSAGES - 60), 3)):
                while len(sent) < at:
                    await asyncio.sleep(0.05)
                victim = workers[rng.randrange(2)]
                victim.kill()
                await asyncio.sleep(rng.uniform(0.1, 1.5))
                loads = victim.loads()
                victim.start()
                await loaded(victim, loads)

        await asyncio.gather(killer(), *(sender(k) for k in range(ROOMS)))
    assert len(sent) == MESSAGES

    deadline = time.monotonic() + 600
    while stack.count_indexed(sent) < MESSAGES:
        assert time.monotonic() < deadline, (
            f"{stack.count_indexed(sent)} of {MESSAGES} indexed; worker logs:\n"
            + "\n".join(w.log.read_text(errors="replace")[-2000:] for w in workers)
        )
        await asyncio.sleep(1)
    log = EventLog(stack.database, read_only=True)
    store = ChromaStore(host="127.0.0.1", port=server.port, eventlog=log)
    held = Counter(e for w in store.iter_windows() for e in w.event_ids if w.room_id in rooms)
    log.close()
    assert set(held) == set(sent), f"missing {len(set(sent) - set(held))}"
    assert [e for e, n in held.items() if n > 1] == []
    # Both workers embedded (the rooms were shared), and the service did not.
    said = [w.log.read_text(errors="replace") for w in workers]
    assert all("worker_indexed" in s for s in said)
    assert sum(w.loads() for w in workers) == 2 + 3  # three restarts
    assert "windows_upserted" not in stack.service.log_path.read_text(errors="replace")
