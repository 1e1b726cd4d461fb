"""Issue 26, low: reading a just-indexed vector raised Chroma's `InternalError: Error
finding id`. Embedded Chroma loads a folder's vector index once per process; a process
that opened the folder before another one wrote to it (a checker beside the service
after a SIGKILL and restart, a CLI) sees the new records' metadata but not their
vectors. The store opens the folder afresh and reads again. Real Chroma, a real second
process."""

from __future__ import annotations

import subprocess
import sys

from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.paths import ROOT

ROOM = RoomID("!ops:example.org")


def window(i: int) -> Window:
    return Window(
        f"w{i:031d}",
        ROOM,
        (Message(EventID(f"$m{i}"), ROOM, UserID("@a:x"), 1_700_000_000_000 + i, f"message {i}"),),
    )


WRITER = """
import sys
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from tests.indexer.store.test_stale_vectors import window
store = ChromaStore(path=__import__("pathlib").Path(sys.argv[1]))
store.upsert([window(i) for i in range(1, 40)], [[1.0, float(i)] + [0.0] * 6 for i in range(1, 40)])
"""


def test_vectors_written_by_another_process_are_read_not_raised(tmp_path):
    reader = ChromaStore(path=tmp_path / "chroma")
    reader.upsert([window(0)], [[1.0] + [0.0] * 7])
    assert [w.window_id for w, _ in reader.get_with_vectors([window(0).window_id])] == [
        window(0).window_id
    ]
    subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path / "chroma")], check=True, cwd=ROOT, timeout=120
    )
    ids = [window(i).window_id for i in range(40)]
    assert [w.window_id for w, _ in reader.get_with_vectors(ids)] == ids  # was: InternalError
    [near] = reader.nearest([[1.0, 39.0] + [0.0] * 6], 1, where={"room_id": ROOM})
    assert near[0].window_id == window(39).window_id
    assert len(reader.get_with_vectors(ids)) == 40
