"""allowlist.yaml's `spaces:` (indexer/ingest/allowlist.py) is additive: a file without
it loads as before, and one with it keeps its rooms; followed.json's space rooms join
the gate's rooms only for the spaces still listed."""

from __future__ import annotations

from matrix_sources.indexer.ingest.allowlist import (
    add_room,
    listed_comments,
    load_allowlist,
    load_spaces,
    remove_room,
)
from matrix_sources.indexer.ingest.followed import (
    Followed,
    SpaceReading,
    Upgrade,
    corpus_rooms,
    load_followed,
    save_followed,
)


def test_a_file_without_spaces_loads_as_before(tmp_path):
    p = tmp_path / "allowlist.yaml"
    p.write_text("rooms:\n  - '!a:x'  # #a:x\n")
    assert load_allowlist(p) == ["!a:x"] and load_spaces(p) == []


def test_spaces_are_added_listed_and_removed_apart_from_rooms(tmp_path):
    p = tmp_path / "allowlist.yaml"
    p.write_text("# the admin's note\nrooms:\n  - '!a:x'  # #a:x\n")
    assert add_room(p, "!s:x", "#space:x", key="spaces")
    assert add_room(p, "!b:x", "upgraded from !a:x")
    assert load_allowlist(p) == ["!a:x", "!b:x"] and load_spaces(p) == ["!s:x"]
    assert listed_comments(p) == {"!a:x": "#a:x", "!b:x": "upgraded from !a:x"}
    assert listed_comments(p, "spaces") == {"!s:x": "#space:x"}
    assert remove_room(p, "!s:x") and load_spaces(p) == []
    text = p.read_text()
    assert "spaces" not in text and "# the admin's note" in text and "#a:x" in text


def test_the_gate_gets_the_rooms_of_listed_spaces_only(tmp_path):
    p = tmp_path / "allowlist.yaml"
    p.write_text("rooms:\n  - '!a:x'\nspaces:\n  - '!s:x'\n")
    save_followed(
        tmp_path,
        Followed(
            {
                "!s:x": SpaceReading(
                    rooms=["!c:x"], subspaces=["!t:x"], refused={"!p:x": "not_public"}
                ),
                "!old:x": SpaceReading(rooms=["!z:x"]),
            },
            [Upgrade("!a:x", "!b:x", True)],
        ),
    )
    assert corpus_rooms(p, tmp_path) == {"!a:x", "!s:x", "!c:x", "!t:x"}
    assert load_followed(tmp_path).accepted_links() == [("!a:x", "!b:x")]


def test_an_unreadable_followed_file_counts_as_empty(tmp_path):
    (tmp_path / "followed.json").write_text("{not json")
    assert load_followed(tmp_path) == Followed()
    (tmp_path / "followed.json").write_text('{"spaces": {"!s": {"rooms": ["!c"], "new": 1}}}')
    assert load_followed(tmp_path).spaces["!s"].rooms == ["!c"]  # unknown keys ignored
