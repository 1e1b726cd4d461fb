"""bench/everyday.py: its questions split into two equal halves by number, none of them
one of the dev off-topic questions, and a missing data dir named with the command that
builds it."""

from __future__ import annotations

import sys

import pytest

from tests.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
everyday = pytest.importorskip("everyday")
asking = pytest.importorskip("asking")


def test_the_questions_are_new_and_split_in_two_equal_halves():
    asked = everyday.questions()
    ids = [qid for qid, _ in asked]
    assert len(asked) == 120 and len(set(ids)) == 120
    assert sum(everyday.half(q) == "odd" for q in ids) == 60
    dev = {texts[0].casefold() for _, texts in asking.offtopic_queries()}
    assert not [q for _, q in asked if q.casefold() in dev]


def test_a_missing_data_dir_names_the_command_that_builds_it(tmp_path):
    with pytest.raises(SystemExit) as e:
        everyday.data_dir("gitter", tmp_path, None)
    assert "bench/retrieval.py --sets gitter" in str(e.value)
