"""The files searches read are read ahead into the page cache at start, from a child
process, only when they fit in a share of the memory available (store/read_ahead.py)."""

from __future__ import annotations

import sys

import pytest

from matrix_sources.indexer.store import read_ahead

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's call")


@pytest.fixture
def files(tmp_path):
    log = tmp_path / "eventlog.sqlite3"
    log.write_bytes(b"e" * (3 * read_ahead.CHUNK + 5))
    meta = tmp_path / "chroma" / "g1" / "chroma.sqlite3"
    meta.parent.mkdir(parents=True)
    meta.write_bytes(b"m" * 10)
    return [log, meta]


def test_every_file_is_handed_to_a_child_process(files):
    commands: list[list[str]] = []
    total = sum(p.stat().st_size for p in files)
    got = read_ahead.read_ahead(files, available=total * 4, run=lambda c: commands.append(c) or 0)
    assert got == total
    [command] = commands
    assert command[0] == sys.executable and command[-2:] == [str(p) for p in files]


def test_files_that_do_not_fit_a_quarter_of_the_memory_are_left(files):
    commands: list[list[str]] = []
    total = sum(p.stat().st_size for p in files)
    assert read_ahead.read_ahead(files, available=total * 4 - 1, run=commands.append) == 0
    assert commands == []


def test_the_child_reads_ahead_every_file_and_skips_a_missing_one(files, tmp_path):
    """The real child: exit status 0, a file gone meanwhile skipped."""
    total = sum(p.stat().st_size for p in files)
    gone = tmp_path / "gone.sqlite3"
    assert read_ahead.read_ahead([*files, gone], available=total * 8) == total
