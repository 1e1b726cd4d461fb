"""The running service without a homeserver, for the moderators' feedback: the real
`Service` (its transaction endpoint, its routing, its metrics) over a data dir with the
hash embedder, and the real `Bot` attached with a recording Matrix port. Transactions
go in through aiohttp's test client, as Synapse sends them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from ruamel.yaml import YAML

from matrix_sources.appservice.bot.bot import Bot
from matrix_sources.appservice.homeserver.service import Service
from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.config import Config, load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.models.embedder import HashEmbedder
from tests.botkit import RecordingMatrix

ROOM = "!moderated:example.org"
DM = "!direct:example.org"  # not on the allowlist: the bot answers, keeps nothing
ALICE, BOB, CAROL, DAVE = (f"@{n}:example.org" for n in ("alice", "bob", "carol", "dave"))
BOT = "@sourcesbot:example.org"
T0 = 1_700_000_000_000


def make_data_dir(root: Path, **sections: dict) -> Path:
    """A data dir for the hash embedder with ROOM allowlisted; `sections` merged into
    config.yaml (e.g. moderation={"digest_room": ...})."""
    data = root / "data"
    init_data_dir(data, "http://127.0.0.1:8008", "example.org")
    y = YAML()
    raw = y.load((data / "config.yaml").read_text())
    raw["index"]["embedder"] = "hash"
    raw["search"]["min_similarity"] = 0.3  # hash vectors: sharing words, or nothing
    raw["search"]["rate_limit_per_minute"] = 0
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    with open(data / "config.yaml", "w") as f:
        y.dump(raw, f)
    (data / "allowlist.yaml").write_text(f"rooms:\n  - '{ROOM}'\n")
    return data / "config.yaml"


@dataclass
class Moderated:
    cfg: Config
    service: Service
    bot: Bot
    matrix: RecordingMatrix
    client: TestClient
    hs_token: str
    now: list[float] = field(default_factory=lambda: [T0 / 1000])
    n: int = 0

    async def put(self, events: list[dict]) -> int:
        self.n += 1
        resp = await self.client.put(
            f"/_matrix/app/v1/transactions/t{self.n}",
            data=json.dumps({"events": events}),
            headers={"Authorization": f"Bearer {self.hs_token}"},
        )
        return resp.status

    async def ask(self, event_id: str, text: str, sender: str = ALICE, room: str = ROOM) -> str:
        """`!sources text` sent and answered; the reply's event id."""
        assert await self.put([message(event_id, f"!sources {text}", sender, room)]) == 200
        await self.bot.idle()
        [reply] = [
            eid
            for eid, (r, c) in zip(self.matrix.ids, self.matrix.sent, strict=True)
            if c.get("m.relates_to", {}).get("m.in_reply_to", {}).get("event_id") == event_id
        ]
        return reply

    def say(self, *bodies: str, sender: str = BOB) -> list[str]:
        """Messages stored and indexed."""
        events = [message(f"$said{self.n}-{i}", b, sender) for i, b in enumerate(bodies)]
        assert self.service.ingest.admit(events).appended == len(bodies)
        self.service.pipeline.process_all()
        return [e["event_id"] for e in events]

    @property
    def feedback(self):
        return self.service.eventlog.feedback


class NumberedMatrix(RecordingMatrix):
    """RecordingMatrix that keeps each sent event's id beside it, and serves the room
    state a test gives it."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.state: dict[str, list] = {}  # room -> its state events (power levels)

    async def room_state(self, room_id):
        return self.state.get(room_id, [])

    async def send(self, room_id, content):
        event_id = await super().send(room_id, content)
        self.ids.append(event_id)
        return event_id


def message(event_id: str, body: str, sender: str = ALICE, room: str = ROOM, ts: int = T0) -> dict:
    return {
        "type": "m.room.message",
        "room_id": room,
        "sender": sender,
        "event_id": event_id,
        "origin_server_ts": ts,
        "content": {"msgtype": "m.text", "body": body},
    }


def reaction(event_id: str, target: str, key: str, sender: str, room: str = ROOM) -> dict:
    return {
        "type": "m.reaction",
        "room_id": room,
        "sender": sender,
        "event_id": event_id,
        "origin_server_ts": T0,
        "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": key}},
    }


def redaction(event_id: str, target: str, sender: str, room: str = ROOM) -> dict:
    return {
        "type": "m.room.redaction",
        "room_id": room,
        "sender": sender,
        "event_id": event_id,
        "origin_server_ts": T0,
        "redacts": target,
        "content": {"redacts": target},
    }


async def open_moderated(config: Path, clock=None) -> Moderated:
    """`clock` (tests/fakeclock.py): the bot's wall time and sleeps; else wall time
    stands at T0 (m.now) and nothing sleeps."""
    cfg = load_config(config)
    service = Service(cfg, HashEmbedder())
    service.ingest.admit(
        [
            {
                "type": "m.room.join_rules",
                "room_id": ROOM,
                "state_key": "",
                "sender": ALICE,
                "event_id": "$jr",
                "origin_server_ts": 1,
                "content": {"join_rule": "public"},
            }
        ]
    )
    matrix = NumberedMatrix()
    now = [T0 / 1000]
    counts = {
        "on_question": service.metrics.count_question,  # as appservice/app.py
        "on_votes": service.metrics.count_votes,
    }
    bot = (
        Bot(cfg, service.index, matrix, clock=clock.clock, **counts)
        if clock
        else Bot(cfg, service.index, matrix, clock=Clock(wall=lambda: now[0]), **counts)
    )
    service.attach(bot)
    client = TestClient(TestServer(service.az.app))
    await client.start_server()
    return Moderated(cfg, service, bot, matrix, client, service.registration.hs_token, now)


async def close_moderated(m: Moderated) -> None:
    await m.bot.stop()
    await m.client.close()
    m.service.search_api.close()
    await asyncio.to_thread(m.service.index.close)
    m.service.lock.release()


def power_levels(users: dict[str, int]) -> dict:
    return {
        "type": "m.room.power_levels",
        "state_key": "",
        "sender": ALICE,
        "room_id": ROOM,
        "event_id": "$pl",
        "content": {"users": users},
    }
