"""A real local Synapse and `matrix-sources run` for the live and query benchmarks,
started the way the end-to-end tests start them (tests/harness.py), all on 127.0.0.1.

Differences from the tests: the service keeps the shipped debounce (1 s) and logs at
INFO, `!sources` is not rate-limited (the benchmarks ask many times a minute), and
`seed_chroma` can put a prepared collection into the data dir before the start.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import perfkit

from tests.harness import Stack, make_stack

BENCH_SETTINGS = {
    "index.debounce_seconds": 1.0,
    "logging.level": "INFO",
    "search.rate_limit_per_minute": 0,
}


def write_allowlist(stack: Stack, rooms: list[str]) -> None:
    (stack.data_dir / "allowlist.yaml").write_text(
        "rooms:\n" + "".join(f"  - '{r}'\n" for r in rooms), encoding="utf-8"
    )


@contextmanager
def running_stack(
    root: Path,
    settings: dict | None = None,
    seed_chroma: Path | None = None,
    allowlist: list[str] | None = None,
):
    """Synapse and the service, started (model loaded, ready), stopped on exit."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    stack = make_stack(root)
    perfkit.apply_settings(stack.config, {**BENCH_SETTINGS, **(settings or {})})
    if allowlist:
        write_allowlist(stack, allowlist)
    if seed_chroma is not None:
        shutil.copytree(seed_chroma, stack.data_dir / "chroma")
        seed_log = seed_chroma.parent / "eventlog.sqlite3"  # the text's one home
        if seed_log.exists():
            shutil.copy2(seed_log, stack.data_dir / "eventlog.sqlite3")
    stack.synapse.start()
    try:
        stack.service.start(timeout=600)
        try:
            yield stack
        finally:
            stack.service.stop()
    finally:
        stack.synapse.stop()


def metrics(stack: Stack) -> dict[str, float]:
    """The service's Prometheus counters and gauges without labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.service.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(matrix_sources_[a-z_]+?)(?:_total)? ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class IndexedWatcher(threading.Thread):
    """Polls the event log (read-only, every `every` s) and notes when each watched
    event was first seen indexed: the moment it became searchable (the pipeline marks
    events indexed only after Chroma acknowledged their window)."""

    def __init__(self, eventlog: Path, every: float = 0.05) -> None:
        super().__init__(daemon=True, name="indexed-watcher")
        self.eventlog, self.every = eventlog, every
        self.sent: dict[str, float] = {}  # event id -> time.monotonic() when sent
        self.indexed: dict[str, float] = {}
        # Settled without a window: the derived filter's (text the bot emitted, pasted
        # back), never indexed by design.
        self.derived: set[str] = set()
        self._halt = threading.Event()
        self._lock = threading.Lock()
        # Read from the events stored by now on: the first poll of a million windows'
        # rows took seconds under the lock, stalling the sender that notes each send.
        self._low = 0
        try:
            db = sqlite3.connect(f"file:{eventlog}?mode=ro", uri=True, timeout=5)
            try:
                self._low = db.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM events").fetchone()[
                    0
                ]
            finally:
                db.close()
        except sqlite3.Error:
            pass  # no event log yet: every row is new

    def watch(self, event_id: str, sent_at: float) -> None:
        with self._lock:
            self.sent[event_id] = sent_at

    def run(self) -> None:
        db = None
        low = self._low
        while not self._halt.is_set():
            try:
                if db is None:
                    db = sqlite3.connect(f"file:{self.eventlog}?mode=ro", uri=True, timeout=5)
                # The lowest pending seq first: whatever lies below it is settled
                # before the read of indexed rows below, so none is skipped.
                pending = db.execute(
                    "SELECT MIN(seq) FROM events WHERE status = 'pending' AND seq >= ?", (low,)
                ).fetchone()[0]
                rows = db.execute(
                    "SELECT seq, event_id, status FROM events WHERE seq >= ?"
                    " AND status IN ('indexed', 'derived')",
                    (low,),
                ).fetchall()
                now = time.monotonic()
                with self._lock:
                    for _, eid, status in rows:
                        if status == "derived":
                            self.derived.add(eid)
                        elif eid in self.sent and eid not in self.indexed:
                            self.indexed[eid] = now
                if pending is not None:
                    low = pending
                elif rows:
                    low = max(low, max(r[0] for r in rows))
            except sqlite3.Error:
                db = None  # the file is not there yet, or busy: try again
            self._halt.wait(self.every)
        if db is not None:
            db.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def settled(self, ids: list[str]) -> bool:
        """Whether every one of `ids` was indexed or judged derived."""
        with self._lock:
            return all(e in self.indexed or e in self.derived for e in ids)

    def wait_all(self, ids: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.settled(ids):
                return True
            time.sleep(0.2)
        return False

    def freshness(self, ids: list[str]) -> list[float]:
        with self._lock:
            return [self.indexed[e] - self.sent[e] for e in ids if e in self.indexed]
