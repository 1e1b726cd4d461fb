"""bench/misses.py's classes: where a question's answer is lost, first place first."""

from __future__ import annotations

import sys

import pytest

from tests.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
misses = pytest.importorskip("misses")

GOLD = frozenset({"$answer"})


def _hit(*ids: str, shown: tuple[str, ...] = ()) -> dict:
    return {"event_ids": list(ids), "shown_event_ids": list(shown or ids[:1])}


@pytest.mark.parametrize(
    ("hits", "fused", "expected"),
    [
        # first hit right and quoting the answer
        ([_hit("$q", "$answer", shown=("$q", "$answer"))], [("$q", "$answer")], ("ok", 1, 1)),
        # quoted from a linked window: the reply's window lacks it, its quote has it
        ([_hit("$q", shown=("$q", "$answer"))], [("$q",), ("$answer",)], ("ok", 2, None)),
        # right window first, other lines quoted
        ([_hit("$q", "$answer", shown=("$q", "$x"))], [("$q", "$answer")], ("quote", 1, 1)),
        # in the reply, second
        ([_hit("$x"), _hit("$answer")], [("$x",), ("$answer",)], ("order", 2, 2)),
        # in the pool, not in the reply
        ([_hit("$x")], [("$x",), ("$y",), ("$answer",)], ("order", 3, None)),
        # below the pool
        ([_hit("$x")], [("$x",)] * 5 + [("$answer",)], ("pool", 6, None)),
        # not found at all
        ([_hit("$x")], [("$x",), ("$y",)], ("model", None, None)),
        ([], [], ("model", None, None)),
    ],
)
def test_each_miss_is_classed_by_the_first_place_its_answer_is_lost(hits, fused, expected):
    assert misses.classify(GOLD, hits, fused, pool=4) == expected
