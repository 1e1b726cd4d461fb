"""What a space brings (indexer/ingest/spacetree.py), from hierarchy pages: public rooms,
sub-spaces to a depth, the rest left out with why; a space listing itself; a space of
10,000 rooms cut at the bound."""

from __future__ import annotations

from matrix_sources.indexer.ingest.spacetree import read_space

VIA = {"via": ["x"]}


def room(rid: str, children=(), space=False, join_rule="public") -> dict:
    return {
        "room_id": rid,
        "join_rule": join_rule,
        **({"room_type": "m.space"} if space else {}),
        "children_state": [
            {"type": "m.space.child", "state_key": c, "content": VIA} for c in children
        ],
    }


def test_rooms_subspaces_and_what_was_left_out():
    page = {
        "rooms": [
            room("!s", ["!a", "!sub", "!priv", "!gone", "!s"], space=True),
            room("!a"),
            room("!sub", ["!b", "!subsub"], space=True),
            room("!b"),
            room("!subsub", ["!c"], space=True),
            room("!c"),
            room("!priv", join_rule="invite"),
        ]
    }
    got, truncated = read_space("!s", [page], depth=1, max_rooms=100)
    assert not truncated
    assert got.rooms == ["!a", "!b"] and got.subspaces == ["!sub"]
    assert got.refused == {
        "!priv": "not_public",
        "!gone": "not_public",  # linked, but the homeserver shows it to no stranger
        "!s": "space_loop",  # the space lists itself
        "!subsub": "too_deep",
    }
    deeper, _ = read_space("!s", [page], depth=2, max_rooms=100)
    assert deeper.rooms == ["!a", "!b", "!c"] and "!subsub" in deeper.subspaces


def test_a_sub_space_listing_its_parent_is_a_loop():
    page = {
        "rooms": [room("!s", ["!t"], space=True), room("!t", ["!s", "!r"], space=True), room("!r")]
    }
    got, _ = read_space("!s", [page], depth=3, max_rooms=10)
    assert got.refused == {"!s": "space_loop"} and got.rooms == ["!r"]


def test_a_child_removed_with_empty_content_is_no_child():
    page = {
        "rooms": [
            {
                "room_id": "!s",
                "room_type": "m.space",
                "children_state": [{"type": "m.space.child", "state_key": "!a", "content": {}}],
            },
            room("!a"),
        ]
    }
    got, _ = read_space("!s", [page], depth=1, max_rooms=10)
    assert got.rooms == [] and got.refused == {}


def test_ten_thousand_children_are_cut_at_the_bound():
    children = [f"!c{i}" for i in range(10_000)]
    pages = [{"rooms": [room("!s", children, space=True)]}] + [
        {"rooms": [room(c) for c in children[i : i + 100]]} for i in range(0, 10_000, 100)
    ]
    got, truncated = read_space("!s", pages, depth=2, max_rooms=2_000)
    assert truncated and len(got.rooms) == 2_000
    assert set(got.refused.values()) == {"not_public"}  # the rest: not read, not followed
