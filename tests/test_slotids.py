"""The keyword postings' packed slot <-> window id map (indexer/search/slotids.py),
against a dict, with hash collisions forced and merges made frequent."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.search import slotids
from indexer.search.slotids import SlotIds

IDS = st.sampled_from([f"w{i}" for i in range(12)] + ["é", "w\u200b1", "ㄱ", ""])
OPS = st.lists(st.tuples(st.sampled_from(["add", "kill", "renumber"]), IDS), max_size=80)


def run(ops) -> None:
    ids, model = SlotIds(), {}  # model: live id -> slot
    for op, wid in ops:
        if op == "add":
            if wid in model:
                assert ids.kill(wid) == model.pop(wid)
            model[wid] = ids.add(wid)
        elif op == "kill":
            assert ids.kill(wid) == model.pop(wid, None)
        else:
            remap = ids.renumber()
            model = {w: int(remap[s]) for w, s in model.items()}
            assert sorted(model.values()) == list(range(len(model)))
        assert ids.count() == len(model)
        for w, slot in model.items():
            assert ids.slot_of(w) == slot and ids.id_of(slot) == w
            assert ids.live.data[slot]
        for w in {"w0", "w5", "é", "nope"} - set(model):
            assert ids.slot_of(w) is None
    live = np.flatnonzero(ids.live.data[:len(ids)])
    assert sorted(ids.ids_of(live)) == sorted(model)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_it_answers_as_a_dict_would(ops):
    run(ops)


@pytest.mark.parametrize("merge_at", [1, 2, 3])
@settings(max_examples=100, deadline=None)
@given(ops=OPS)
def test_it_answers_as_a_dict_would_when_every_hash_collides(ops, merge_at):
    # Every id hashes to its length modulo 2: collisions in the recent dict and in runs of
    # the sorted array, merged after every 1 to 3 additions.
    saved = slotids.id_hash, slotids.MERGE_AT
    slotids.id_hash, slotids.MERGE_AT = (lambda s: len(s) % 2), merge_at
    try:
        run(ops)
    finally:
        slotids.id_hash, slotids.MERGE_AT = saved


def test_renumbering_keeps_the_order_and_packs_the_bytes():
    ids = SlotIds()
    for i in range(5000):
        ids.add(f"w{i:05d}")
    for i in range(0, 5000, 3):
        ids.kill(f"w{i:05d}")
    remap = ids.renumber()
    assert len(ids) == ids.count() == 5000 - 1667
    assert ids.ids_of(np.arange(3)) == ["w00001", "w00002", "w00004"]
    assert remap[0] == -1 and remap[4] == 2
    assert len(ids._blob) == 6 * ids.count()  # the dead ids' bytes are gone
    assert ids.slot_of("w04999") == remap[4999] and ids.slot_of("w04998") is None
