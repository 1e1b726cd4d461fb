"""bench/quotes.py --outside: each first hit's lines outside its conversation, read back
from the set's events with their sender and time."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from tests.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
quotes = pytest.importorskip("quotes")


def test_each_outside_line_is_printed_under_its_question(tmp_path):
    events = tmp_path / "events.jsonl"
    rows = [
        {"event_id": "$q", "sender": "@ann:x", "origin_server_ts": 0, "content": {"body": "q?"}},
        {
            "event_id": "$off",
            "sender": "@bob:x",
            "origin_server_ts": 86_400_000 + 3_600_000,
            "content": {"body": "ports\nare   another\tmatter"},
        },
    ]
    events.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    items = [SimpleNamespace(id="item-1", query="How do I do it?")]
    text = quotes.outside_lines(SimpleNamespace(events=events), items, {"item-1": ["$off"]})
    assert text.splitlines() == [
        "  item-1: How do I do it?",
        "    01-02 01:00 @bob:x: ports are another matter",
    ]
