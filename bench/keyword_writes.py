"""What the keyword index costs the event log's writes: the event log's side of an
import (append, then mark_indexed, which refreshes the windows' keyword rows in the same
transaction; indexer/store/eventlog/keywords.py), with and without the index.

    .venv/bin/python bench/keyword_writes.py [--eval-dir DIR] [--windows 20000]

The windows are bench/corpus100k.py's generated rooms (eval chat re-windowed by the real
chunker), one mark_indexed a room, as textindex.py writes them; no embedding. "without"
replaces keywords.refresh with nothing in this process (what the event log wrote
before issue 48). Each side writes a fresh SQLite event log in a temporary folder; the
two run one after the other, twice, so load from other processes weighs on both.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import corpus100k  # noqa: E402
import evalkit  # noqa: E402
import perfkit  # noqa: E402


def batches(root: Path, windows: int) -> list:
    from matrix_sources.indexer.pipeline.chunker import build_windows

    rooms = corpus100k.eval_messages(root)
    out, n, done = [], 0, 0
    while done < windows:
        ws = build_windows(corpus100k.stream(rooms, n), corpus100k.policy(), "")[: windows - done]
        n += 1
        out.append(ws)
        done += len(ws)
    return out


def write(rooms: list, index: bool) -> float:
    from matrix_sources.indexer.store.eventlog import keywords
    from matrix_sources.indexer.store.eventlog.log import EventLog

    refresh = keywords.refresh
    if not index:
        keywords.refresh = lambda cur, ids: None  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            log = EventLog(Path(tmp) / "eventlog.sqlite3")
            t = time.perf_counter()
            for ws in rooms:
                log.append([(m, None) for w in ws for m in w.messages])
                log.mark_indexed(
                    ws[0].room_id,
                    {m.event_id: w.window_id for w in ws for m in w.messages},
                    ws[-1].messages[-1],
                )
            took = time.perf_counter() - t
            log.close()
            return took
    finally:
        keywords.refresh = refresh


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eval-dir", default=None)
    p.add_argument("--windows", type=int, default=20_000)
    args = p.parse_args(argv)
    perfkit.quiet_env()
    rooms = batches(evalkit.eval_dir(args.eval_dir), args.windows)
    print(f"{args.windows} windows in {len(rooms)} rooms; load {perfkit.load_average()}")
    for _ in range(2):
        without, with_index = write(rooms, False), write(rooms, True)
        print(
            f"without the index {without:.1f} s, with it {with_index:.1f} s "
            f"({args.windows / with_index:.0f} windows/s; load {perfkit.load_average()})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
