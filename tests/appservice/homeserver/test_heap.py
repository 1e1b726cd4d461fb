"""Heap hygiene (appservice/homeserver/heap.py): `run` and `import` re-execute themselves with glibc
overwriting freed memory, so Chroma's HNSW files, written from uninitialised buffers,
cannot carry text the process held before (a refused message, a purged window)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from matrix_sources.appservice.homeserver.heap import MARKER, TUNABLES, hygienic_env

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc tunables")
CANARY = "kestrel-heap-canary-2f7d"


@glibc_only
def test_hygienic_env_adds_the_tunables_once():
    env = hygienic_env({"PATH": "/bin"})
    assert env["GLIBC_TUNABLES"] == ":".join(TUNABLES) and env[MARKER] == "1"
    kept = hygienic_env({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"})
    assert kept["GLIBC_TUNABLES"] == "glibc.malloc.mmap_threshold=131072:" + ":".join(TUNABLES)
    # An admin's own arena cap wins over ours; the hygiene tunables are still added.
    own = hygienic_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"})
    assert own["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=4:" + ":".join(TUNABLES[:2])
    assert hygienic_env(env) is None  # already re-executed: never loops
    assert hygienic_env({MARKER: "0"}) is None  # opted out
    assert hygienic_env({"GLIBC_TUNABLES": ":".join(TUNABLES)}) is None


def _child(code: str, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@glibc_only
def test_the_command_re_executes_itself_with_the_tunables():
    code = (
        "import os; from matrix_sources.appservice.homeserver.heap import ensure_heap_hygiene; "
        "ensure_heap_hygiene(); print(os.environ.get('GLIBC_TUNABLES'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in (MARKER, "GLIBC_TUNABLES")}
    assert _child(code, env).strip() == ":".join(TUNABLES)
    assert _child(code, {**env, MARKER: "0"}).strip() == "None"


LEAK = """
import json, sys
from pathlib import Path
from matrix_sources.indexer.models.embedder import HashEmbedder
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window, WindowID
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

root, canary = Path(sys.argv[1]), sys.argv[2]
room = RoomID("!r:x")
for n in range(6):
    store = ChromaStore(path=root / f"c{n}", collection=f"heap{n}")
    windows = [Window(WindowID(f"w{i}"), room, (Message(
        EventID(f"$e{i}"), room, UserID("@a:x"), 1, (f"{canary} " * 40)[:300 + 4 * i + n]),))
        for i in range(3)]
    store.upsert(windows, HashEmbedder().encode(["words"] * len(windows)))
print(json.dumps(sorted(str(p.relative_to(root)) for p in root.rglob("*.bin")
                        if canary.encode() in p.read_bytes())))
"""


@glibc_only
def test_hnsw_files_hold_no_text_under_heap_hygiene(tmp_path: Path):
    """Without hygiene about one run in two of this child leaks the documents' text into
    `length.bin` or `data_level0.bin` (checked by hand); with it, none may."""
    env = hygienic_env({k: v for k, v in os.environ.items() if k != MARKER})
    assert env is not None
    leaked = json.loads(_child(LEAK, env, str(tmp_path), CANARY))
    assert leaked == []
    # The text itself is never handed to Chroma (no documents): only the process's
    # heap held it, which is what the hygiene keeps out of the HNSW files.
    assert not any(CANARY.encode() in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


async def test_what_searches_freed_goes_back_once_they_pause():
    """The trim waits for `quiet` seconds without a search (a search's own time is never
    spent on it), runs once for a burst, off the event loop, and again after the next."""
    import asyncio
    import threading

    from matrix_sources.appservice.homeserver.heap import IdleTrim
    from tests.fakeclock import FakeClock

    fake = FakeClock(1000.0)
    trims: list[str] = []
    loop_thread = threading.get_ident()
    trim = IdleTrim(
        fake.clock,
        quiet=2.0,
        release=lambda: trims.append(
            "off the loop" if threading.get_ident() != loop_thread else "on the loop"
        ),
    )
    trim.start()

    async def settle() -> None:
        for _ in range(5):
            await asyncio.sleep(0)  # the loop's callbacks from the search threads
        await trim.trimmed()

    # A burst of searches, each from a search thread, one a second.
    for _ in range(3):
        await asyncio.to_thread(trim.searched)
        await settle()
        await fake.advance(1.0)
        await settle()
    assert trims == []  # never within 2 s of a search
    await fake.advance(1.5)
    await settle()
    assert trims == ["off the loop"]
    await fake.advance(10.0)
    await settle()
    assert trims == ["off the loop"]  # once for the burst
    await asyncio.to_thread(trim.searched)
    await settle()
    await fake.advance(2.5)
    await settle()
    assert trims == ["off the loop"] * 2
    trim.stop()


async def test_searches_without_a_pause_are_trimmed_between_them_too():
    """A stream of `!sources` with no 2 s pause in it: what they freed goes back every
    `busy` seconds, not only once they stop."""
    import asyncio

    from matrix_sources.appservice.homeserver.heap import IdleTrim
    from tests.fakeclock import FakeClock

    fake = FakeClock(1000.0)
    trims: list[float] = []
    trim = IdleTrim(fake.clock, quiet=2.0, busy=5.0, release=lambda: trims.append(fake.now))
    trim.start()

    async def settle() -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        await trim.trimmed()

    for _ in range(12):  # one a second, from 1000 to 1011
        await asyncio.to_thread(trim.searched)
        await settle()
        await fake.advance(1.0)
        await settle()
    assert trims == [1005.0, 1011.0]  # the search 5 s after the first untrimmed one
    await fake.advance(2.0)
    await settle()
    assert len(trims) == 3  # and once in the pause after the last
    trim.stop()
