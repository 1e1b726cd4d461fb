"""The artifact manifest and its inverted index: lookups equal a brute-force scan over
any sequence of adds, removals and merges; the file is shared by processes (appends
picked up, rewrites noticed), torn lines survive, answers are deduplicated."""

from __future__ import annotations

import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from matrix_sources.indexer.derived import shingleindex
from matrix_sources.indexer.derived.manifest import Manifest
from matrix_sources.indexer.derived.shingleindex import ShingleIndex
from matrix_sources.indexer.records import Artifact, EventID
from tests.strength import examples

# -- the inverted index, against brute force -------------------------------------------------

shingle_sets = st.frozensets(st.integers(0, 40) | st.integers(2**63, 2**64 - 1), max_size=12)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), shingle_sets),
        st.tuples(st.just("bulk"), st.lists(shingle_sets, max_size=4)),
        st.tuples(st.just("discard"), st.integers(0, 30)),
        st.tuples(st.just("merge"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=examples(150), deadline=None)
@given(ops=ops, query=shingle_sets)
def test_overlaps_equal_a_scan(ops, query):
    old = shingleindex.MIN_MERGE
    shingleindex.MIN_MERGE = 5  # merge often, so base, delta and dead all get exercised
    try:
        index, truth, next_ordinal = ShingleIndex(), {}, 0
        for op, arg in ops:
            if op == "add":
                index.add(next_ordinal, arg)
                truth[next_ordinal] = arg
                next_ordinal += 1
            elif op == "bulk":
                items = [(next_ordinal + i, s) for i, s in enumerate(arg)]
                index.bulk_add(items)
                truth.update(items)
                next_ordinal += len(items)
            elif op == "discard":
                index.discard(arg)
                truth.pop(arg, None)
            else:
                index.merge()
            expected = {o: len(s & query) for o, s in truth.items() if s & query}
            assert index.overlaps(query) == expected
            assert index.overlaps(query, 2) == {o: n for o, n in expected.items() if n >= 2}
            assert len(index) == len(truth)
    finally:
        shingleindex.MIN_MERGE = old


def test_a_merge_drops_removed_postings():
    index = ShingleIndex()
    index.bulk_add([(0, {1, 2, 3}), (1, {3, 4})])
    index.discard(0)
    index.add(2, {4, 5})
    index.merge()
    assert index.postings == 4  # (3,1) (4,1) (4,2) (5,2)
    assert index.overlaps({3, 4, 5}) == {1: 2, 2: 2}


# -- the manifest file -----------------------------------------------------------------------


def art(
    name: str,
    shingles: set[int],
    kind: str = "reference",
    corpus: str = "ops",
    sha: str | None = None,
    k: int = 5,
    sources: tuple = (),
) -> Artifact:
    return Artifact(
        kind,
        name,
        sha or f"sha-{name}",
        frozenset(shingles),
        "2025-01-01T00:00:00Z",
        k,
        corpus if kind == "reference" else "",
        tuple(EventID(s) for s in sources),
    )


def test_append_is_seen_by_another_reader_without_rereading(tmp_path):
    path = tmp_path / "artifacts.jsonl"
    writer, reader = Manifest(path, 5), Manifest(path, 5)
    assert writer.append([art("a", {1, 2}), art("b", {2, 3})]) == 2
    reader.refresh()
    assert {i.name for i in reader.live()} == {"a", "b"}
    writer.append([art("c", {9})])
    reader.refresh()
    assert sorted(n for i, n in reader.overlaps({2, 9})) == [1, 1, 1]
    entry = json.loads(path.read_text().splitlines()[0])
    assert set(entry) == {"kind", "name", "sha256", "shingles", "emitted_at", "k", "corpus"}


def test_remove_rewrites_atomically_and_readers_follow(tmp_path):
    path = tmp_path / "artifacts.jsonl"
    writer, reader = Manifest(path, 5), Manifest(path, 5)
    writer.append([art("a", {1}), art("b", {2}, corpus="other"), art("c", {3})])
    reader.refresh()
    inode = os.stat(path).st_ino
    assert writer.remove(lambda e: e.get("corpus") == "ops") == 2
    assert os.stat(path).st_ino != inode  # a new file, renamed over the old
    reader.refresh()
    assert [i.name for i in reader.live()] == ["b"]
    assert reader.overlaps({1, 2, 3}) == [(reader.live()[0], 1)]
    assert not path.with_name("artifacts.jsonl.tmp").exists()


def test_a_torn_last_line_is_ended_not_joined(tmp_path):
    path = tmp_path / "artifacts.jsonl"
    Manifest(path, 5).append([art("a", {1})])
    with open(path, "a") as f:
        f.write('{"kind": "reference", "name": "torn", "sh')  # a crash mid-append
    m = Manifest(path, 5)
    m.append([art("b", {2})])
    fresh = Manifest(path, 5)
    fresh.refresh()
    assert {i.name for i in fresh.live()} == {"a", "b"}


def test_answers_are_deduplicated_by_content_and_sources_kept(tmp_path):
    m = Manifest(tmp_path / "artifacts.jsonl", 5)
    a1 = art("answer:$r1#1", {1, 2}, kind="answer", sha="same", sources=("$e1",))
    a2 = art("answer:$r2#1", {1, 2}, kind="answer", sha="same", sources=("$e1",))
    assert m.append([a1]) == 1 and m.append([a2]) == 0
    [info] = m.live(kind="answer")
    assert info.sources == ("$e1",)


def test_entries_of_another_shingle_size_are_counted_not_matched(tmp_path):
    path = tmp_path / "artifacts.jsonl"
    Manifest(path, 4).append([art("old", {1}, k=4)])
    m = Manifest(path, 5)
    m.refresh()
    assert len(m) == 0 and m.stale == 1 and m.overlaps({1}) == []


def test_a_later_entry_of_the_same_name_replaces_the_earlier(tmp_path):
    path = tmp_path / "artifacts.jsonl"
    m = Manifest(path, 5)
    m.append([art("a", {1}, sha="v1")])
    m.append([art("a", {2}, sha="v2")])
    assert [i.sha256 for i in m.live()] == ["v2"]
    assert [n for _, n in m.overlaps({1, 2})] == [1]


def test_a_name_repeated_within_one_read_keeps_only_the_last(tmp_path):
    path = tmp_path / "artifacts.jsonl"
    Manifest(path, 5).append([art("a", {1}, sha="v1")])
    Manifest(path, 5).append([art("a", {2}, sha="v2")])
    fresh = Manifest(path, 5)
    fresh.refresh()  # both lines in one read
    assert [i.sha256 for i in fresh.live()] == ["v2"]
    assert [(i.sha256, n) for i, n in fresh.overlaps({1, 2})] == [("v2", 1)]
