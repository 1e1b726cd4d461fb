"""The collection in segments (indexer/store/vectors/segments.py): new points fill a hot
segment that is sealed when full, a point stays in the segment it was written to, a
compaction copies only the segments holding a deleted or overwritten point, small
sealed segments merge, a large one splits, and a search over the segments answers as
one collection would."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from matrix_sources.indexer.clock import Clock
from matrix_sources.indexer.pipeline.chunker import window_id
from matrix_sources.indexer.records import EventID, Message, RoomID, UserID, Window
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore
from matrix_sources.indexer.store.vectors.generations import SEGMENTS_KEY
from matrix_sources.indexer.store.vectors.idmap import IdMap
from matrix_sources.indexer.store.vectors.segments import SegmentPolicy, plan_merge
from tests.storekit import stored_vectors
from tests.strength import examples
from tests.vectorscan import files_holding

ROOM = RoomID("!seg:example.org")
DIM = 16


def window(i: int, room: RoomID = ROOM) -> Window:
    m = Message(EventID(f"$seg{i}"), room, UserID("@u:example.org"), 1_700_000_000_000 + i, "")
    return Window(window_id(room, m.event_id), room, (m,), "seg")


def vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def open_store(
    tmp_path: Path, policy: SegmentPolicy | None = None, log: bool = True, folder: str = "chroma"
) -> ChromaStore:
    return ChromaStore(
        path=tmp_path / folder,
        policy=policy,
        eventlog=EventLog(tmp_path / "eventlog.sqlite3") if log else None,
    )


def fill(
    store: ChromaStore, n: int, offset: int = 0, seed: int = 1, batch: int = 3
) -> dict[str, np.ndarray]:
    ws = [window(i) for i in range(offset, offset + n)]
    vs = vectors(n, seed)
    for i in range(0, n, batch):
        store.upsert(ws[i : i + batch], vs[i : i + batch])
    return {w.window_id: v for w, v in zip(ws, vs)}


def layout(store: ChromaStore) -> list[tuple[int, int, bool]]:
    """(generation, points, dirty) of each segment, oldest first."""
    segs = store.segments
    return [(s.n, c, s.dirty) for s, c in zip(segs.list, segs.counts())]


def same_answers(a, b) -> bool:
    """The same neighbours in the same order, similarities within float rounding."""
    return all(
        [x.window_id for x in p] == [x.window_id for x in q]
        and np.allclose([x.similarity for x in p], [x.similarity for x in q], atol=1e-5)
        for p, q in zip(a, b, strict=True)
    )


def folder_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(path)).encode() + p.read_bytes())
    return h.hexdigest()


# -- the policy ------------------------------------------------------------------------

P = SegmentPolicy(hot=10, fanout=4, cap=160, share=None)


def test_size_classes_grow_by_the_fanout():
    assert [P.level(c) for c in (0, 1, 10, 11, 40, 41, 160, 161)] == [0, 0, 0, 1, 1, 2, 2, 3]


def test_four_sealed_segments_of_one_class_merge_and_the_hot_one_never_does():
    assert plan_merge([10, 10, 10, 3], P) is None  # three sealed: not yet
    assert plan_merge([10, 10, 10, 10, 3], P) == (0, 4)
    assert plan_merge([40, 40, 40, 10, 10, 10, 10, 0], P) == (3, 7)
    assert plan_merge([40, 40, 40, 40, 10, 2], P) == (0, 4)  # 160 fits the cap
    assert plan_merge([10, 10, 10, 10], P) is None  # the last is hot, not sealed
    assert plan_merge([160, 160, 160, 160, 1], P) is None  # no merge past the cap


def test_an_empty_sealed_segment_goes_and_a_shrunk_one_joins_its_smaller_neighbour():
    assert plan_merge([40, 0, 40, 5], P) == (1, 2)
    assert plan_merge([40, 4, 9, 40, 5], P) == (1, 3)  # 4 < hot/2, beside 9 (< 40)
    assert plan_merge([158, 4, 160, 5], P) is None  # fits beside neither


def test_a_small_index_has_small_segments_and_a_large_one_segments_up_to_the_cap():
    """The shipped policy: at 10,000 windows a hot segment of 1,000 and merges up to
    1,250 (a redaction copies a fifth of the index at most, not all of it); from
    32,000 on a hot segment of 2,000; at 1,000,000 segments of 32,000 (3.2%)."""
    p = SegmentPolicy()
    assert [(p.hot_cap(t), p.merge_cap(t)) for t in (0, 10_000, 100_000, 1_000_000)] == [
        (1_000, 1_000),
        (1_000, 1_250),
        (2_000, 12_500),
        (2_000, 32_000),
    ]
    assert plan_merge([1_000] * 9 + [500], p) is None  # four of 1,000 would be past 1,187
    assert plan_merge([2_000] * 31 + [100], p) is None  # 62,100: a merge up to 7,762
    assert plan_merge([2_000] * 32 + [100], p) == (0, 4)  # 64,100: up to 8,012
    assert [p.largest(t) for t in (10_000, 100_000, 1_000_000)] == [1_000, 8_000, 32_000]


def test_the_shipped_sizes_fit_under_the_powers_of_two_chroma_reserves():
    """Chroma's HNSW index holds the next power of two of a segment's points (in
    memory too, with the heap scrub): each size class the policy makes must fit just
    under one, or a full segment reserves up to twice its points."""
    p = SegmentPolicy()
    sizes, s = [], p.hot
    while s <= p.cap:
        sizes.append(s)
        s *= p.fanout
    assert sizes[-1] == p.cap
    for s in sizes:
        room = 1 << (s - 1).bit_length()
        assert s < room and room / s < 1.05, (s, room)


def test_the_id_map_follows_sets_deletes_merges_and_drops():
    m = IdMap()
    ids = [window(i).window_id for i in range(6)] + ["rchunk", "x7"]
    m.load(ids[:3], 0)
    m.set(ids[3:], 1)
    assert m.get(ids) == [0, 0, 0, 1, 1, 1, 1, 1] and m.counts == {0: 3, 1: 5}
    m.delete([ids[0], "x7"])
    m.rekey([0], 2)
    assert m.get(ids) == [-1, 2, 2, 1, 1, 1, 1, -1] and +m.counts == {1: 4, 2: 2}
    m.fold()
    m.drop_key(1)
    assert m.get(ids) == [-1, 2, 2, -1, -1, -1, -1, -1] and len(m) == 2


# -- placing points -------------------------------------------------------------------


def test_new_points_fill_the_hot_segment_which_is_sealed_when_full(tmp_path):
    store = open_store(tmp_path, SegmentPolicy(hot=4, fanout=4, cap=16, share=None))
    fill(store, 10, batch=3)  # a batch that overfills the hot segment is cut where it fills
    assert [c for _, c, _ in layout(store)] == [4, 4, 2]
    assert not any(d for _, _, d in layout(store))  # nothing deleted or overwritten
    recorded = json.loads(store.eventlog.get_meta(SEGMENTS_KEY))
    assert [e["g"] for e in recorded] == [n for n, _, _ in layout(store)]
    assert store.count() == 10 and len(store.get()) == 10


def test_a_point_is_updated_and_deleted_in_its_own_segment_which_becomes_dirty(tmp_path):
    store = open_store(tmp_path, SegmentPolicy(hot=4, fanout=4, cap=16, share=None))
    first = fill(store, 10)
    old = window(1)  # in the first segment
    new_vector = vectors(1, seed=99)
    store.upsert([old], new_vector)
    assert store.count() == 10  # updated where it is: no copy in another segment
    assert stored_vectors(store, [old.window_id])[old.window_id] == pytest.approx(
        new_vector[0], abs=1e-6
    )
    assert [d for _, _, d in layout(store)] == [True, False, False]
    store.delete([window(5).window_id])  # the second segment
    assert [(c, d) for _, c, d in layout(store)] == [(4, True), (3, True), (2, False)]
    again = open_store(tmp_path, SegmentPolicy(hot=4, fanout=4, cap=16, share=None))  # a restart
    assert layout(again) == layout(store)  # the dirty marks are in the catalog
    assert set(stored_vectors(again, list(first))) == set(first) - {window(5).window_id}


# -- compaction, merge, split -----------------------------------------------------------


def test_a_compaction_copies_only_the_dirty_segments_and_leaves_no_deleted_vector(tmp_path):
    """The deleted point's vector is gone from every file; the clean segments' files
    are not touched, byte for byte."""
    store = open_store(tmp_path, SegmentPolicy(hot=6, fanout=4, cap=24, share=None))
    vs = fill(store, 16)
    gone = window(8).window_id  # the second segment
    store.delete([gone])
    before = layout(store)
    clean = {n: folder_digest(store.path / f"g{n}") for n, _, d in before if not d}
    assert files_holding(store.path, vs[gone], n=DIM)  # still in its files
    assert store.compact() == 5
    after = layout(store)
    assert [c for _, c, _ in after] == [6, 5, 4] and not any(d for _, _, d in after)
    assert after[0][0] == before[0][0] and after[2][0] == before[2][0]  # not copied
    assert after[1][0] > before[2][0]  # a fresh generation
    assert {n: folder_digest(store.path / f"g{n}") for n in clean} == clean
    assert files_holding(tmp_path, vs[gone], n=DIM) == {}
    assert sorted(p.name for p in store.path.iterdir()) == sorted(f"g{n}" for n, _, _ in after)
    kept = stored_vectors(store, [w for w in vs if w != gone])
    assert all(kept[w] == pytest.approx(v, abs=1e-6) for w, v in vs.items() if w != gone)
    assert store.compact() == 0  # nothing dirty: nothing copied


def test_small_sealed_segments_merge_and_answer_as_before(tmp_path):
    store = open_store(tmp_path, SegmentPolicy(hot=3, fanout=2, cap=12, share=None))
    vs = fill(store, 14)
    assert [c for _, c, _ in layout(store)] == [3, 3, 3, 3, 2]
    q = vectors(3, seed=5)
    before = store.nearest(q, 6)
    merged = 0
    while store.merge_due():
        merged += store.merge()
    assert [c for _, c, _ in layout(store)] == [12, 2] and merged == 6 + 6 + 12
    assert same_answers(store.nearest(q, 6), before)
    assert set(stored_vectors(store, list(vs))) == set(vs)
    gens = {n for n, _, _ in layout(store)}
    assert {int(p.name[1:]) for p in store.path.iterdir()} == gens  # the merged ones went
    fill(store, 1, offset=100)  # new points still go to the hot segment
    assert [c for _, c, _ in layout(store)] == [12, 3]


def test_a_segment_larger_than_the_cap_is_split_when_copied(tmp_path):
    """The one collection of the release before segments is a segment past the cap:
    its first compaction writes it as several."""
    big = open_store(tmp_path, SegmentPolicy(hot=100, fanout=4, cap=400, share=None))
    vs = fill(big, 10)
    q = vectors(2, seed=3)
    before = big.nearest(q, 10)
    store = open_store(tmp_path, SegmentPolicy(hot=2, fanout=2, cap=4, share=None))
    store.delete([window(0).window_id])
    assert store.compact() == 9
    assert [c for _, c, _ in layout(store)] == [3, 3, 3]
    assert [n.window_id for n in store.nearest(q, 10)[0]] == [
        n.window_id for n in before[0] if n.window_id != window(0).window_id
    ]
    assert set(stored_vectors(store, list(vs))) == set(vs) - {window(0).window_id}
    fill(store, 1, offset=50)  # the hot segment is full: sealed, a new one
    assert [c for _, c, _ in layout(store)] == [3, 3, 3, 1]


def test_a_store_without_an_event_log_finds_its_segments_on_disk(tmp_path):
    store = open_store(tmp_path, SegmentPolicy(hot=4, fanout=4, cap=16, share=None), log=False)
    vs = fill(store, 9)
    again = open_store(tmp_path, SegmentPolicy(hot=4, fanout=4, cap=16, share=None), log=False)
    assert [c for _, c, _ in layout(again)] == [4, 4, 1]
    assert set(stored_vectors(again, list(vs))) == set(vs)


# -- one collection or many: the same answers (a property) -------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            st.lists(st.integers(0, 30), min_size=1, max_size=6),
            st.integers(0, 10_000),
        ),
        st.tuples(
            st.just("delete"), st.lists(st.integers(0, 30), min_size=1, max_size=4), st.just(0)
        ),
        st.tuples(st.just("compact"), st.just([]), st.just(0)),
        st.tuples(st.just("merge"), st.just([]), st.just(0)),
    ),
    min_size=1,
    max_size=10,
)


# Each example opens Chroma clients (about 0.2 s each here): few examples, and no
# shrinking (it took over five minutes on a failure); the failing example is printed.
@settings(
    max_examples=examples(25),
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=_OPS, hot=st.integers(2, 5), fanout=st.integers(2, 3), seed=st.integers(0, 99))
def test_segments_answer_as_one_collection(tmp_path_factory, ops, hot, fanout, seed):
    """Any mix of upserts (new and again), deletes, compactions and merges: every
    query gets the same nearest points and similarities from the segments as from one
    collection holding the same points, and the same records."""
    tmp = tmp_path_factory.mktemp("prop")
    one = open_store(
        tmp, SegmentPolicy(hot=10**6, fanout=2, cap=10**6, share=None), log=False, folder="one"
    )
    policy = SegmentPolicy(hot=hot, fanout=fanout, cap=hot * fanout**2, share=None)
    many = open_store(tmp, policy, log=False, folder="many")
    rng = np.random.default_rng(seed)
    for op, keys, vseed in ops:
        if op == "upsert":
            keys = list(dict.fromkeys(keys))
            ws = [window(k) for k in keys]
            # One vector per key and draw: no two points tie (their order would be
            # Chroma's to choose).
            vs = np.concatenate([vectors(1, k * 10_007 + vseed) for k in keys])
            one.upsert(ws, vs)
            many.upsert(ws, vs)
        elif op == "delete":
            gone = [window(k).window_id for k in dict.fromkeys(keys)]
            one.delete(gone)
            many.delete(gone)
        elif op == "compact":
            many.compact()
        else:
            many.merge()
    assert many.count() == one.count()
    assert sorted(many.records()["ids"]) == sorted(one.records()["ids"])
    queries = rng.normal(size=(3, DIM)).astype(np.float32)
    for n in (1, 3, 40):
        for a, b in zip(
            many.nearest(queries, n, records=True), one.nearest(queries, n, records=True)
        ):
            assert [x.window_id for x in a] == [x.window_id for x in b]
            assert [x.similarity for x in a] == pytest.approx([x.similarity for x in b], abs=1e-5)
            assert [x.window for x in a] == [x.window for x in b]
    ids = [window(k).window_id for k in range(0, 31, 2)]
    got = {w.window_id: (w, v) for w, v in many.get_with_vectors(ids)}
    want = {w.window_id: (w, v) for w, v in one.get_with_vectors(ids)}
    assert got.keys() == want.keys()
    for wid, (w, v) in want.items():  # a copy keeps the vector to float32's last bits
        assert got[wid][0] == w and got[wid][1] == pytest.approx(v, abs=1e-6)


# -- the schedule: compactions first, merges when no compaction may run ------------------


def test_the_schedule_merges_when_no_compaction_may_run_and_waits_after_a_failed_merge(tmp_path):
    from matrix_sources.indexer.store.compaction import Compaction

    store = open_store(tmp_path, SegmentPolicy(hot=3, fanout=2, cap=12, share=None))
    fill(store, 8)  # sealed 3, 3 and a hot 2: a merge is due
    now = [1000.0]
    comp = Compaction(store.eventlog, store, every=60.0, clock=Clock(wall=lambda: now[0]))
    assert comp.wait() == 0.0 and comp.run() is True
    assert [c for _, c, _ in layout(store)] == [6, 2] and comp.wait() is None
    store.delete([window(0).window_id])
    comp.request({window(0).window_id})
    assert comp.wait() == 0.0 and comp.run() is True  # the compaction
    assert not any(d for _, _, d in layout(store)) and comp.wait() is None
    fill(store, 7, offset=20)  # sealed 5, 3, 3 and a hot 3: a merge is due again
    assert [c for _, c, _ in layout(store)] == [5, 3, 3, 3]
    store.delete([window(21).window_id])
    comp.request({window(21).window_id})
    assert comp.wait() == 0.0  # a compaction is due but too soon; a merge may run
    assert comp.run() is True and comp.due  # it merged
    assert [(c, d) for _, c, d in layout(store)] == [(5, False), (5, False), (3, False)]
    assert comp.run() is True  # and merged again
    assert [c for _, c, _ in layout(store)] == [10, 3]
    assert comp.wait() > 0 and comp.run() is None  # now it waits for the interval
    now[0] += 60
    assert comp.run() is True and not comp.due

    def failing(lock=None):
        raise RuntimeError("chroma unreachable")

    fill(store, 6, offset=40)
    assert store.merge_due()
    store.merge = failing
    with pytest.raises(RuntimeError):
        comp.run()
    assert comp.wait() is None and comp.run() is None  # not retried at once
    now[0] += 61
    assert comp.wait() == 0.0


# -- shared: embedding workers write the collection too ------------------------------------


def _shared(tmp_path: Path) -> ChromaStore:
    return ChromaStore(
        path=tmp_path / "chroma",
        policy=SegmentPolicy(hot=4, fanout=4, cap=16, share=None),
        eventlog=EventLog(tmp_path / "eventlog.sqlite3"),
        shared=True,
    )


def _points(tmp_path: Path) -> dict[str, int]:
    """Id -> how many segments hold it, as a fresh process reads the folder."""
    store = open_store(tmp_path, SegmentPolicy(hot=4, fanout=4, cap=16, share=None))
    held: dict[str, int] = {}
    for seg in store.segments.list:
        for wid in seg.collection.get(include=[])["ids"]:
            held[wid] = held.get(wid, 0) + 1
    return held


def test_shared_segments_find_what_another_process_wrote_and_are_never_sealed(tmp_path):
    """Two workers' stores: each map misses the other's points. An update of one goes
    where it is (never a second copy in the hot segment), a delete reaches it, a read
    finds it, and new points never seal the hot segment (the service alone changes the
    list)."""
    fill(open_store(tmp_path, SegmentPolicy(hot=4, fanout=4, cap=16, share=None)), 10)
    a, b = _shared(tmp_path), _shared(tmp_path)
    assert b.count() == 10  # b's map read now: it will miss what a writes next
    fill(a, 6, offset=20, seed=2)
    assert [c for _, c, _ in layout(a)] == [4, 4, 8]  # the hot one took all six
    new = vectors(1, seed=7)
    b.upsert([window(22)], new)  # b never saw it: found in the hot segment
    b.upsert([window(1)], new)  # and one of the first segment's
    b.delete([window(23).window_id])
    held = _points(tmp_path)
    assert set(held) == {window(i).window_id for i in [*range(10), 20, 21, 22, 24, 25]}
    assert set(held.values()) == {1}  # no point in two segments
    got = stored_vectors(a, [window(22).window_id, window(1).window_id])
    assert all(v == pytest.approx(new[0], abs=1e-6) for v in got.values())
    assert [w.window_id for w, _ in b.get_with_vectors([window(25).window_id])] == [
        window(25).window_id
    ]


def test_a_worker_follows_the_segments_the_services_compaction_swapped(tmp_path):
    service, worker = _shared(tmp_path), _shared(tmp_path)
    vs = fill(service, 6)
    assert worker.count() == 6 and not worker.follow_live()  # nothing swapped yet
    service.delete([window(1).window_id])
    before = [n for n, _, _ in layout(service)]
    assert service.compact(everything=True) == 5
    assert worker.follow_live()  # its next fenced commit opens the new generation
    assert [n for n, _, _ in layout(worker)] == [n for n, _, _ in layout(service)] != before
    new = vectors(1, seed=9)
    worker.upsert([window(2)], new)
    assert _points(tmp_path) == {w: 1 for w in vs if w != window(1).window_id}
    assert stored_vectors(service, [window(2).window_id])[window(2).window_id] == pytest.approx(
        new[0], abs=1e-6
    )
    assert files_holding(tmp_path, vs[window(1).window_id], n=DIM) == {}


def test_a_reopened_store_counts_without_reading_every_id(tmp_path):
    """The start-up check and the first search need only the number: a reopened store
    counts each segment's points and leaves the map of which segment holds each id
    (8 s at a million windows) to the first write or lookup."""
    store = open_store(tmp_path, P)
    fill(store, 35)
    again = open_store(tmp_path, P)
    assert len(again.segments.list) > 1
    assert again.count() == 35 and again.segments._map is None
    again.upsert([window(35)], vectors(1, 9))
    assert again.count() == 36 and again.segments._map is not None


def test_the_map_preloaded_at_start_is_the_one_a_lookup_reads(tmp_path):
    store = open_store(tmp_path, P)
    held = fill(store, 35)
    again = open_store(tmp_path, P)
    again.segments.preload()
    m = again.segments._map
    assert m is not None and len(m) == 35
    assert [len(ids) for _, ids in again.segments.locate(sorted(held))] == [
        c for c in again.segments.counts() if c
    ]
    assert again.segments.idmap() is m  # read once


def test_a_read_before_the_map_is_read_asks_the_segments_and_leaves_the_map_unread(tmp_path):
    """A search's record reads (get_with_vectors) at start: the map of every id is read
    off the lock by `preload`; a read meanwhile must not read it under the lock."""
    store = open_store(tmp_path, P)
    held = fill(store, 35)
    again = open_store(tmp_path, P)
    wanted = sorted(held)[::3] + ["$nowhere"]
    found = [(seg.key, sorted(ids)) for seg, ids in again.segments.locate(wanted, find=True)]
    assert again.segments._map is None
    assert len(again.get_with_vectors(wanted)) == len(wanted) - 1
    assert again.segments._map is None
    again.segments.preload()
    assert found == [
        (seg.key, sorted(ids)) for seg, ids in again.segments.locate(wanted, find=True)
    ]
    assert sum(len(ids) for _, ids in found) == len(wanted) - 1 and len(found) > 1


def test_segments_asked_a_share_first_answer_as_asked_for_all(tmp_path, monkeypatch):
    """A search of several segments asks each for a share of the n nearest first, and
    again for n where that share may hide more of them (chroma.FIRST_SHARE): the same
    neighbours, in the same order, as one collection; here with clusters of points
    that each lie in one segment, so that segments must be asked again."""
    from matrix_sources.indexer.store.vectors import chroma

    monkeypatch.setattr(chroma, "FIRST_MIN", 1)
    one = open_store(
        tmp_path, SegmentPolicy(hot=10**6, fanout=2, cap=10**6, share=None), log=False, folder="one"
    )
    many = open_store(
        tmp_path, SegmentPolicy(hot=6, fanout=3, cap=54, share=None), log=False, folder="many"
    )
    rng = np.random.default_rng(7)
    centres = vectors(6, 99)
    points = np.concatenate(
        [c + 0.05 * rng.normal(size=(12, DIM)) for c in centres] + [vectors(60, 5)]
    ).astype(np.float32)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    ws = [window(i) for i in range(len(points))]
    for i in range(0, len(points), 4):  # a cluster's points written one after another
        one.upsert(ws[i : i + 4], points[i : i + 4])
        many.upsert(ws[i : i + 4], points[i : i + 4])
    assert len(many.segments.list) >= 4
    queries = np.concatenate([centres, vectors(4, 11)]).astype(np.float32)
    for n in (4, 8, 12, 40, 200):
        assert same_answers(many.nearest(queries, n), one.nearest(queries, n)), n
    assert many.asked_further > 0  # the clusters' segments were asked again


def test_a_map_kept_at_a_clean_stop_is_the_one_the_segments_give(tmp_path):
    """The map of which segment holds each id, kept by a clean stop and taken by the
    next start (store/clean_stop.py), answers every look-up as the map read from the
    segments; one naming a generation that is not live is not taken."""
    from matrix_sources.indexer.store import clean_stop

    policy = SegmentPolicy(hot=4, fanout=4, cap=16, share=None)
    store = open_store(tmp_path, policy)
    points = fill(store, 40)
    store.delete([window(3).window_id, window(17).window_id])
    store.upsert([window(5)], vectors(1, 77))
    kept = store.segments.map_by_generation()
    assert kept is not None
    chroma, log = tmp_path / "chroma", tmp_path / "eventlog.sqlite3"
    store.eventlog.close()
    clean_stop.mark(chroma, log, kept)
    assert clean_stop.unchanged(chroma, log)
    keys, gens, other = clean_stop.id_map(chroma)

    read = open_store(tmp_path, policy)
    taken = open_store(tmp_path, policy)
    assert taken.segments.adopt_map(keys, gens, other)
    ids = [*points, "w" + "f" * 31, "other-form"]
    assert taken.segments.idmap().get(ids) == read.segments.idmap().get(ids)
    assert taken.segments.counts() == read.segments.counts()
    assert taken.count() == read.count() == 38
    # A map of generations that are not live (a compaction swapped one since): read.
    stale = gens.copy()
    stale[0] = max(gens) + 100
    assert not open_store(tmp_path, policy).segments.adopt_map(keys, stale, other)


def test_a_kept_map_is_not_read_if_its_file_changed(tmp_path):
    from matrix_sources.indexer.store import clean_stop

    store = open_store(tmp_path)
    fill(store, 10)
    chroma, log = tmp_path / "chroma", tmp_path / "eventlog.sqlite3"
    store.eventlog.close()
    clean_stop.mark(chroma, log, store.segments.map_by_generation())
    assert clean_stop.id_map(chroma) is not None
    path = tmp_path / "chroma.idmap.npz"
    path.write_bytes(path.read_bytes()[:-1])
    assert clean_stop.id_map(chroma) is None
    clean_stop.clear(chroma)
    assert not path.exists() and not clean_stop.unchanged(chroma, log)
