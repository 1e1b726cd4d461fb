"""Window id <-> slot for the keyword postings (indexer/search/slotids.py) against a
dict: any run of adds, removes, folds and compactions, with window ids (packed) and
ids of other forms, gives the same slots and ids back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.search import slotids
from indexer.search.slotids import SlotIds
from indexer.search.termindex import TermIndex

from .strength import examples

# Window ids whose last hex digits are 0 pack to bytes ending in NUL, which numpy's
# fixed-width bytes drop: they must still come back whole.
WINDOW_IDS = ["w" + "0" * 31, "w" + "f" * 31, "w" + "0" * 30 + "1", "w1" + "0" * 30,
              "wabc" + "0" * 28, "w" + "0123456789abcdef" * 2][:6] + [
    "w" + format(i * 7919, "031x") for i in range(1, 30)]
OTHER_IDS = ["r1", "ref:abc", "wxyz", "W" + "a" * 31, "w" + "A" * 31, "w" + "0" * 32, ""]
ids = st.sampled_from(WINDOW_IDS + OTHER_IDS)
ops = st.lists(st.tuples(st.sampled_from(["add", "remove", "fold", "compact"]), ids),
               max_size=120)


@settings(max_examples=examples(300), deadline=None)
@given(ops, st.sampled_from([1, 3, 1000]))
def test_slots_follow_a_dict(run, fold_at):
    slotids.FOLD_AT, saved = fold_at, slotids.FOLD_AT
    try:
        got, model = SlotIds(), {}  # model: id -> slot
        for op, wid in run:
            if op == "add":
                if wid in model:
                    assert got.remove(wid) == model.pop(wid)
                model[wid] = got.add(wid)
            elif op == "remove":
                assert got.remove(wid) == model.pop(wid, None)
            elif op == "fold":
                got.fold()
            else:
                remap = got.compact()
                model = {w: int(remap[s]) for w, s in model.items()}
                assert sorted(model.values()) == list(range(len(model)))
            assert len(got) == len(model)
            for w in WINDOW_IDS + OTHER_IDS:
                assert got.get(w) == model.get(w), (op, w)
            if model:
                listed = list(model.items())
                assert got.ids_of([s for _, s in listed]) == [w for w, _ in listed]
    finally:
        slotids.FOLD_AT = saved


def test_the_postings_answer_by_window_id_through_writes_removals_and_a_compaction():
    """TermIndex over real window ids: a window written again moves to a new slot, a
    removed one stops matching, and after a compaction (every slot renumbered) each
    word still finds exactly its windows, by id."""
    index = TermIndex()
    docs = {w: f"grub partition {i % 3} word{i}" for i, w in enumerate(WINDOW_IDS)}
    meta = [{"room_id": "!r:x", "corpus": "chat"}] * len(docs)
    index.texts_written(list(docs), list(docs.values()), meta)
    index.ready.set()
    gone = WINDOW_IDS[::3]
    index.remove(gone)
    rewritten = WINDOW_IDS[1::3]
    index.texts_written(rewritten, ["rewritten text"] * len(rewritten), meta)
    for compacted in (False, True):
        if compacted:
            index._compact()
            assert index.slots() == len(WINDOW_IDS) - len(gone)
        kept = [w for w in WINDOW_IDS if w not in gone and w not in rewritten]
        assert set(index.postings("grub", False) or {}) == set(kept)
        assert set(index.postings("rewritten", False) or {}) == set(rewritten)
        for i, w in enumerate(WINDOW_IDS):
            assert set(index.postings(f"word{i}", False) or {}) == (
                {w} if w in kept else set())
        assert index.count() == len(WINDOW_IDS) - len(gone)
        assert index.lengths(WINDOW_IDS) == {
            w: (2 if w in rewritten else 4) for w in WINDOW_IDS if w not in gone}
