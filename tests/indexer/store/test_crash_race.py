"""The crash test's `missing 1` (issue 26 item 8), through the transaction endpoint: a
backfill page or a retried transaction brings messages older than the open block after
the live ones were indexed. The event log must never count a message indexed that no
Chroma record holds. (The pipeline-level tests with fault injection at each step are
in test_eventlog_pipeline.py.)"""

from __future__ import annotations

from collections import Counter

from matrix_sources.indexer.records import ChunkPolicy
from tests.appservice.homeserver.test_backpressure import ROOM, World
from tests.appservice.homeserver.test_transactions import put

MINUTE = 60_000
T0 = 1_700_000_000_000
# 30-byte lines, 100-byte windows, 200-byte blocks: six messages a block, and the
# windows of two people talking interleave inside it.
POLICY = ChunkPolicy(max_bytes=100, gap_ms=30 * 60_000, block_windows=2)


def line(i: int, minute: int, sender: str) -> dict:
    return {
        "type": "m.room.message",
        "room_id": ROOM,
        "event_id": f"$t{i:03d}",
        "sender": f"@{sender}:example.org",
        "origin_server_ts": T0 + minute * MINUTE,
        "content": {"msgtype": "m.text", "body": f"line {i:03d} of the talk".ljust(30, ".")},
    }


async def test_history_older_than_the_open_block_never_leaves_a_message_unsearchable(tmp_path):
    async with World(tmp_path, policy=POLICY) as w:
        live = [line(i, 2 * i, "ab"[i % 3 == 0]) for i in range(11)]
        assert (await put(w.client, "1", {"events": live}))[0] == 200
        w.pipeline.process_all()
        late = [line(100, 9, "a")]  # sent before the open block began, pushed after
        assert (await put(w.client, "2", {"events": late}))[0] == 200
        w.pipeline.process_all()
        more = [line(11, 24, "b")]
        assert (await put(w.client, "3", {"events": more}))[0] == 200
        w.pipeline.process_all()
        sent = {e["event_id"] for e in live + late + more}
        held = Counter(e for win in w.store.get() for e in win.event_ids)
        assert set(held) == sent, f"missing {sorted(sent - set(held))}"
        assert [e for e, n in held.items() if n > 1] == []
        assert w.log.counts() == {"indexed": len(sent)}
