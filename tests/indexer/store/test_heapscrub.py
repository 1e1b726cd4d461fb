"""Freed memory never reaches Chroma's files (indexer/store/vectors/heapscrub.py).

hnswlib writes its whole vector array, unused capacity included, and that capacity
holds whatever the process freed there: a deleted vector of an earlier collection can
land in a new collection's `data_level0.bin`, the privacy flake of earlier sessions.
Each check runs in a child process: the scrub is process-wide and cannot be undone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import ROOT

_MALLOC = """
import ctypes, sys
if sys.argv[1] == "scrub":
    import matrix_sources.indexer.store  # noqa: F401 - sets the scrub
    from matrix_sources.indexer.store.vectors.heapscrub import SCRUBBED
    assert SCRUBBED
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 39_600  # a new collection's vector array: 100 slots of a 64-dimension point
block = libc.malloc(size)
ctypes.memset(block, 0x5A, size)  # a secret
libc.free(block)
again = libc.malloc(size)  # glibc hands the freed block back
held = ctypes.string_at(again, size)
print(held.count(b"Z"))
"""


def _run(script: str, *args: str, timeout: float = 120) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, cwd=ROOT, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return proc.stdout.decode().strip().splitlines()[-1]


def test_a_freed_block_is_overwritten_before_it_is_handed_out_again():
    assert int(_run(_MALLOC, "plain")) > 30_000  # without: the secret comes back
    assert int(_run(_MALLOC, "scrub")) == 0


@pytest.mark.slow  # 200 rounds of two Chroma clients: about 30 s here
def test_no_deleted_vector_of_an_earlier_collection_reaches_a_new_ones_files():
    """A copy like a compaction's, 200 times in one process with the scrub on: a new
    collection's files never hold a deleted vector of an earlier one. Without the scrub
    they do in some rounds, how many depending on the machine's load (0.25 to 5% of
    rounds here, so not a test: `bench/heapscrub.py` measures both sides); the test
    above shows deterministically what the scrub changes."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "heapscrub.py"), "--child", "scrub", "200"],
        capture_output=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert int(proc.stdout.decode().split()[-1]) == 0
