"""A clean stop vouches for the pair (collection, event log) only while nothing wrote
either: any file of the Chroma folder, or the event log, changed, added or removed
since means the start's whole id check (store/clean_stop.py)."""

from __future__ import annotations

import os

import pytest

from matrix_sources.indexer.store import clean_stop


@pytest.fixture
def pair(tmp_path):
    chroma = tmp_path / "chroma"
    (chroma / "g1" / "seg").mkdir(parents=True)
    (chroma / "g1" / "chroma.sqlite3").write_bytes(b"x" * 100)
    (chroma / "g1" / "seg" / "data_level0.bin").write_bytes(b"v" * 64)
    log = tmp_path / "eventlog.sqlite3"
    log.write_bytes(b"log")
    clean_stop.mark(chroma, log, None)
    assert clean_stop.unchanged(chroma, log)
    return chroma, log


def _later(path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_a_rewritten_file_of_the_same_size_is_seen(pair):
    chroma, log = pair
    _later(chroma / "g1" / "seg" / "data_level0.bin")
    assert not clean_stop.unchanged(chroma, log)


def test_a_file_added_or_removed_is_seen(pair):
    chroma, log = pair
    (chroma / "g2").mkdir()
    (chroma / "g2" / "chroma.sqlite3").write_bytes(b"")
    assert not clean_stop.unchanged(chroma, log)
    (chroma / "g2" / "chroma.sqlite3").unlink()
    assert clean_stop.unchanged(chroma, log)  # an empty folder holds nothing
    (chroma / "g1" / "seg" / "data_level0.bin").unlink()
    assert not clean_stop.unchanged(chroma, log)


def test_the_event_log_written_since_is_seen(pair):
    chroma, log = pair
    log.write_bytes(b"log and more")
    assert not clean_stop.unchanged(chroma, log)


def test_the_start_clears_it_and_an_open_log_is_never_vouched_for(pair):
    chroma, log = pair
    clean_stop.clear(chroma)
    assert not clean_stop.unchanged(chroma, log)
    (log.parent / (log.name + "-wal")).write_bytes(b"")
    clean_stop.mark(chroma, log, None)  # the log not closed: the next start checks
    assert not clean_stop.unchanged(chroma, log)


def test_a_server_on_either_side_is_never_vouched_for(pair):
    chroma, log = pair
    assert not clean_stop.unchanged(None, log) and not clean_stop.unchanged(chroma, None)
    clean_stop.mark(None, None, None)  # nothing to stamp: no error


def test_a_damaged_stamp_means_the_check(pair):
    chroma, log = pair
    (chroma.parent / "chroma.clean").write_text("{not json")
    assert not clean_stop.unchanged(chroma, log)
