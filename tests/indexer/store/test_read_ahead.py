"""The files searches read are read ahead into the page cache at start, only when they
fit in a share of the memory available (store/read_ahead.py)."""

from __future__ import annotations

import os

import pytest

from matrix_sources.indexer.store import read_ahead


@pytest.fixture
def files(tmp_path):
    log = tmp_path / "eventlog.sqlite3"
    log.write_bytes(b"e" * (3 * read_ahead.CHUNK + 5))
    meta = tmp_path / "chroma" / "g1" / "chroma.sqlite3"
    meta.parent.mkdir(parents=True)
    meta.write_bytes(b"m" * 10)
    (tmp_path / "chroma" / "g1" / "data_level0.bin").write_bytes(b"v" * 10)
    return [log, meta]


def test_every_chunk_of_every_file_is_asked_for(files, monkeypatch):
    asked: list[tuple[int, int]] = []
    monkeypatch.setattr(
        os, "posix_fadvise", lambda fd, off, n, advice: asked.append((off, advice)), raising=False
    )
    total = sum(p.stat().st_size for p in files)
    assert read_ahead.read_ahead(files, available=total * 4) == total
    chunks = [off for off, _ in asked]
    assert chunks == [0, read_ahead.CHUNK, 2 * read_ahead.CHUNK, 3 * read_ahead.CHUNK, 0]
    assert {a for _, a in asked} == {os.POSIX_FADV_WILLNEED}


def test_files_that_do_not_fit_a_quarter_of_the_memory_are_left(files, monkeypatch):
    asked: list[int] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda *a: asked.append(1), raising=False)
    total = sum(p.stat().st_size for p in files)
    assert read_ahead.read_ahead(files, available=total * 4 - 1) == 0
    assert asked == []


def test_no_call_no_read_ahead(files, monkeypatch):
    monkeypatch.delattr(os, "posix_fadvise", raising=False)
    assert read_ahead.read_ahead(files, available=1 << 40) == 0
