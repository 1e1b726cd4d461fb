"""A restart serves searches from the index before every allowlisted room is joined and
its state learnt again (a round trip each: minutes with thousands of rooms). Through a
real Synapse with the real model: one room indexed, the service stopped, a room added to
the allowlist whose join hangs (its server accepts the connection and never answers),
the service started again. The search API answers while the join still hangs, /health
and mautrix's readiness say starting and why; once the join fails, the service is ready.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.tools.chatclient import ChatClient
from matrix_sources.indexer.store.eventlog.db import reader
from tests.harness import Stack, make_stack, wait_for

pytestmark = [pytest.mark.synapse, pytest.mark.model]

# A window lost from the Chroma folder while the service is stopped (a backup restored):
# deleted by a process of its own, as an operator's tool would.
_LOSE_WINDOWS = """
import sys
from pathlib import Path
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
store = ChromaStore(path=Path(sys.argv[1]) / "chroma", eventlog=EventLog(sys.argv[2]))
store.delete(sys.argv[3:])
"""

CONVERSATION = [
    "the backup job keeps failing with a permission error on /srv/backups",
    "run it as the backup user, or chown -R backup:backup /srv/backups",
    "thanks, chown fixed it",
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    """A homeserver that federates (tests/federation.py's loopback trust), so a join
    through another server is tried, not refused at once."""
    s = make_stack(tmp_path_factory.mktemp("stack"), federating=True)
    s.synapse.start()
    try:
        s.service.start()
        yield s
    finally:
        s.service.stop()
        s.synapse.stop()


class Blackhole:
    """A TCP listener that takes connections and never answers them (a homeserver that
    hangs) until closed, when every connection it took is dropped."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.taken: list[socket.socket] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.taken.append(conn)

    def close(self) -> None:
        self._closed.set()
        self.sock.close()
        for c in self.taken:
            c.close()


def search(stack, token: str, text: str) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{stack.service.port}/_matrix_sources/v1/search",
        data=json.dumps({"texts": [text]}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return 0, {}


async def test_a_restart_searches_before_every_room_is_joined_again(stack):
    user, token = stack.synapse.register_user("erin", "erin-password")
    async with ChatClient(stack.synapse.url, user, token) as erin:
        room = await erin.create_room("Backups", public=True)
        stack.allowlist_add(room)
        await erin.wait_for_member(room, stack.bot)
        ids = [await erin.send(room, body) for body in CONVERSATION]
    stack.wait_indexed(ids)
    async with ChatClient(stack.synapse.url, user, token) as erin:
        # Stopped the moment the reply arrives, as the bench's restart does: the answer
        # under way is let finish (marked answered), not answered again after the restart.
        await erin.ask(room, "!sources backup permission error", stack.bot)
    stack.service.stop()
    restarted_at = stack.service.log_path.stat().st_size
    # A clean stop stamps the SQLite event log, so the next start skips quick_check;
    # the start removes the stamp (a crash then leaves none).
    stamp = Path(stack.database + ".clean")
    stamp_kept = stack.database.endswith(".sqlite3")
    assert stamp.exists() == stamp_kept

    hole = Blackhole()
    try:
        hanging = f"!hangs:127.0.0.1:{hole.port}"
        yaml = YAML()
        path = stack.data_dir / "allowlist.yaml"
        listed = yaml.load(path.read_text())
        listed["rooms"].append({"id": hanging, "via": [f"127.0.0.1:{hole.port}"]})
        with path.open("w") as f:
            yaml.dump(listed, f)

        stack.service.start(wait_ready=False)
        assert not stamp.exists()
        api_token = (stack.data_dir / "api_token").read_text().strip()
        found: dict = {}

        def answered() -> bool:
            found["status"], found["body"] = search(stack, api_token, "backup permission error")
            return found["status"] == 200

        wait_for("the search API answering after the restart", answered, 120)
        assert ids[1] in found["body"]["hits"][0]["event_ids"]
        # The join still hangs: the service serves, but is not ready, and says why.
        wait_for("Synapse asking the hanging server", lambda: bool(hole.taken), 60)
        assert stack.http("/_matrix/mau/ready")[0] != 200
        status, body = stack.http("/health")
        assert status == 503 and json.loads(body)["status"] == "starting"
        assert "joining" in json.loads(body)["detail"]
    finally:
        hole.close()
    wait_for("ready once the hanging join failed", lambda: stack.http("/health")[0] == 200, 180)
    assert stack.http("/_matrix/mau/ready")[0] == 200
    # Start-up's one-off work done (the check, the id map, the first search), what it
    # freed is handed back (heap.release_free_memory).
    wait_for(
        "start-up's freed memory handed back",
        lambda: "start_up_memory_released" in stack.service.log_path.read_text(errors="replace"),
        60,
    )
    with stack.service.log_path.open(errors="replace") as f:
        f.seek(restarted_at)
        resumed = [line for line in f.read().splitlines() if "commands_resumed" in line]
    assert resumed and "answered_now=0" in resumed[0], resumed
    failed = [
        line for line in stack.service.log_path.read_text().splitlines() if "join_failed" in line
    ]
    assert any(hanging in line for line in failed), failed

    # The next start does not ask again: the room waits for its next try (joins.json).
    assert hanging in json.loads((stack.data_dir / "joins.json").read_text())
    stack.service.stop()
    at = stack.service.log_path.stat().st_size
    stack.service.start()
    with stack.service.log_path.open(errors="replace") as f:
        f.seek(at)
        after = f.read()
    deferred = [line for line in after.splitlines() if "joins_deferred" in line]
    assert deferred and "rooms=1" in deferred[0], deferred
    assert hanging not in after, "the room whose join failed was tried again at once"

    # A clean stop after a checked run vouches for the collection (store/clean_stop.py):
    # that start read no id list (an event log on PostgreSQL is never vouched for).
    checked = [line for line in after.splitlines() if "collection_checked" in line]
    assert checked and ("ids_read=False" in checked[0]) == stamp_kept, checked
    # and kept the map of which segment holds each id, which that start took.
    assert (" id_map_kept " in after) == stamp_kept

    # What searches read from disk asked into the page cache (store/read_ahead.py): the
    # event log (SQLite) and each generation's chroma.sqlite3. A background task after
    # the start, from a child process: its line may come after the service is ready.
    def read_ahead_lines() -> list[str]:
        with stack.service.log_path.open(errors="replace") as f:
            f.seek(at)
            return [line for line in f.read().splitlines() if " read_ahead " in line]

    ahead = wait_for("the read-ahead's log line", read_ahead_lines, 30.0)
    assert f"files={2 if stamp_kept else 1}" in ahead[0], ahead
    # Until anything writes the pair: a window lost from the Chroma folder while the
    # service is stopped is found by the next start's id check and indexed again.
    stack.service.stop()
    with reader(stack.database) as db:
        lost = sorted(
            {
                r[0]
                for r in db.execute(
                    "SELECT window_id FROM events WHERE event_id = ?", (ids[1],)
                ).fetchall()
            }
        )
    assert lost
    done = subprocess.run(
        [sys.executable, "-c", _LOSE_WINDOWS, str(stack.data_dir), stack.database, *lost],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    at = stack.service.log_path.stat().st_size
    stack.service.start()
    with stack.service.log_path.open(errors="replace") as f:
        f.seek(at)
        checked = [line for line in f.read().splitlines() if "collection_checked" in line]
    assert checked and "ids_read=True" in checked[0], checked

    def found_again() -> bool:
        status, body = search(stack, api_token, "backup permission error")
        return status == 200 and any(ids[1] in h["event_ids"] for h in body["hits"])

    wait_for("the lost window indexed again", found_again, 120)
