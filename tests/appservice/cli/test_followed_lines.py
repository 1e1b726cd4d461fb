"""What `allowlist list`, `doctor` and `!sources status` say of spaces and upgrades
(followed.json): each space's rooms and what was left out, each chain, each upgrade not
followed with its rule."""

from __future__ import annotations

from types import SimpleNamespace

from matrix_sources.appservice.bot.status import follow_notes
from matrix_sources.appservice.cli.allowlist import list_lines
from matrix_sources.appservice.cli.doctor import Check
from matrix_sources.appservice.cli.doctor_follow import check_followed
from matrix_sources.indexer.ingest.followed import Followed, SpaceReading, Upgrade, save_followed


def world(tmp_path):
    (tmp_path / "allowlist.yaml").write_text(
        "rooms:\n  - '!a:x'  # #ops:x\n  - '!b:x'  # upgraded from !a:x\n"
        "spaces:\n  - '!s:x'  # #community:x\n  - '!unread:x'\n"
    )
    save_followed(
        tmp_path,
        Followed(
            {
                "!s:x": SpaceReading(
                    ["!c:x"], ["!t:x"], {"!p:x": "not_public", "!s:x": "space_loop"}
                )
            },
            [
                Upgrade("!a:x", "!b:x", True),
                Upgrade("!b:x", "!e:x", False, "upgrade_refused", "encrypted_room"),
            ],
        ),
    )
    return SimpleNamespace(data_dir=tmp_path, allowlist_path=tmp_path / "allowlist.yaml")


def test_allowlist_list_shows_spaces_chains_and_refusals(tmp_path):
    lines = list_lines(world(tmp_path))
    assert lines == [
        "!a:x  # #ops:x",
        "!b:x  # upgraded from !a:x",
        "space !s:x  # #community:x: 1 room(s), 1 sub-space(s), 2 left out",
        "  room !c:x",
        "  sub-space !t:x",
        "  left out !p:x (not_public)",
        "  left out !s:x (space_loop)",
        "space !unread:x: not read yet (the service reads it when it runs)",
        "upgrade !a:x -> !b:x",
        "upgrade refused !b:x -> !e:x (upgrade_refused: encrypted_room)",
    ]


def test_doctor_judges_space_rooms_and_warns_of_an_upgrade_not_followed(tmp_path):
    cfg = world(tmp_path)
    judged = []

    def check_room(room: str) -> Check:
        judged.append(room)
        return Check(f"room {room}", False, "refused (encrypted_room)")

    checks = {c.name: c for c in check_followed(cfg, check_room)}
    assert judged == ["!c:x"]
    space = checks["space !s:x"]
    assert space.ok and "brings 1 room(s) and 1 sub-space(s)" in space.detail
    assert "!p:x (not_public)" in space.detail
    room = checks["room !c:x (in space !s:x)"]
    assert room.ok and room.warning  # not listed by the admin: a warning, not a failure
    assert checks["room !b:x"].detail == "upgrade chain !a:x -> !b:x"
    up = checks["upgrade !b:x"]
    assert up.ok and up.warning and "!e:x, not followed (upgrade_refused" in up.detail
    assert checks["space !unread:x"].warning
    assert not [c for c in check_followed(cfg, None) if c.name.startswith("room !c")]


def test_status_notes_each_rooms_chain_and_space(tmp_path):
    world(tmp_path)
    from matrix_sources.indexer.ingest.followed import load_followed

    notes, lines = follow_notes(load_followed(tmp_path))
    assert notes == {"!b:x": "chain !a:x -> !b:x", "!c:x": "in space !s:x", "!t:x": "in space !s:x"}
    assert lines[0].startswith("Space !s:x: brings 1 room(s), 1 sub-space(s); left out 2")
    assert lines[1] == "Upgrade of !b:x to !e:x not followed: upgrade_refused (encrypted_room)"
