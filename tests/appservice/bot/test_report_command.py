"""`!sources report` (issue 47 item 3), through the service's transaction endpoint: the
room's moderators get its report as a notice; anyone else a polite refusal naming who
can ask; the report is no question itself."""

from __future__ import annotations

import pytest

from tests.moderationkit import (
    ALICE,
    BOB,
    CAROL,
    DM,
    ROOM,
    close_moderated,
    make_data_dir,
    open_moderated,
    power_levels,
    reaction,
)

UP = "\N{THUMBS UP SIGN}"


@pytest.fixture
async def moderated(tmp_path):
    m = await open_moderated(make_data_dir(tmp_path, search={"admins": [CAROL]}))
    m.matrix.state[ROOM] = [power_levels({ALICE: 50})]
    yield m
    await close_moderated(m)


def notice(m, reply_id: str) -> dict:
    return m.matrix.sent[m.matrix.ids.index(reply_id)][1]


async def test_a_moderator_gets_the_rooms_report_and_a_member_a_refusal(moderated):
    m = moderated
    m.say("rotate the signing key with the rotate-key command, then restart")
    answered = await m.ask("$q1", "how do I rotate the signing key", BOB)
    await m.ask("$q2", "kestrel mirror outage yesterday", BOB)
    await m.ask("$q3", "Kestrel mirror outage yesterday?", ALICE)
    await m.put([reaction("$v1", answered, UP, ALICE)])
    await m.bot.idle()

    body = notice(m, await m.ask("$report", "report", ALICE))["body"]
    assert "3 asked, 1 answered, 2 nothing matches" in body
    assert f"{UP} 1" in body
    assert "2x kestrel mirror outage yesterday" in body
    assert "https://matrix.to/#/%21moderated%3Aexample.org/%24q2?via=example.org" in body
    assert "https://matrix.to/#/%21moderated%3Aexample.org/%24q3?via=example.org" in body

    refusal = notice(m, await m.ask("$report2", "report", BOB))
    assert refusal["body"].startswith(
        "Sorry, `!sources report` is for this room's moderators (power level 50 or more)"
    )
    admin = notice(m, await m.ask("$report3", "report", CAROL))  # search.admins
    assert "3 asked, 1 answered" in admin["body"]
    assert m.feedback.figures(ROOM, 0).asked == 3  # `report` is no question


async def test_the_notice_escapes_what_was_asked(moderated):
    m = moderated
    await m.ask("$q1", "<b>kestrel</b> & <script>mirror</script>", BOB)
    content = notice(m, await m.ask("$report", "report", ALICE))
    assert "&lt;script&gt;mirror&lt;/script&gt;" in content["formatted_body"]
    assert "<script>" not in content["formatted_body"]
    assert content["m.mentions"] == {}


async def test_a_room_the_index_does_not_read_has_nothing_to_report(moderated):
    m = moderated
    m.matrix.state[DM] = [power_levels({ALICE: 100}) | {"room_id": DM}]
    body = notice(m, await m.ask("$report", "report", ALICE, room=DM))["body"]
    assert body.startswith("Nothing is counted in this room")
