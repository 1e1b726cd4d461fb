"""A message withdrawn while the bot's reply quoting it is on its way.

The reply is sent first and what it quoted recorded after (the reply's event id is only
known once sent). A redaction, an erasure or a server ACL landing in between used to
find no recorded reply to edit, so the quote lived on in the room."""

from __future__ import annotations

from collections.abc import Callable

from matrix_sources.appservice.bot.answer_edits import EDITED, WithdrawnLately
from matrix_sources.appservice.bot.bot import Bot
from tests.botkit import RecordingMatrix
from tests.indexer.derived.test_derived_filter import command, redact, say, world  # noqa: F401


class WithdrawingMatrix(RecordingMatrix):
    """Sends the reply, and before the bot has recorded it the quoted message is
    withdrawn: the edit that follows runs and finishes first."""

    def __init__(self) -> None:
        super().__init__()
        self.bot: Bot | None = None
        self.withdraw: Callable[[], set[str]] | None = None  # once, as the reply is sent

    async def send(self, room_id, content):
        event_id = await super().send(room_id, content)
        if self.withdraw is not None and self.bot is not None:
            ids, self.withdraw = self.withdraw(), None
            self.bot.on_withdrawn(ids)
            await self.bot.idle()  # that edit's search done: it found nothing recorded
        return event_id


async def test_a_quote_withdrawn_before_the_reply_is_recorded_is_edited_out(world):  # noqa: F811
    alice, bob = "@alice:example.org", "@bob:example.org"
    question = say(world, "how do we rotate the signing key of our homeserver?", alice, 0)
    answer = say(
        world,
        "rotate the signing key by generating a new one and keeping the old one "
        "under old_signing_keys so remote servers can still verify past events",
        bob,
        3,
        reply_to=question,
    )
    world.run()
    matrix = WithdrawingMatrix()
    bot = Bot(world.cfg, world.index, matrix)
    matrix.bot = bot
    matrix.withdraw = lambda: redact(world, answer)  # as the reply quoting it is sent
    reply = await bot.responder.answer(command("!sources rotate the signing key", "$ask"))
    assert reply is not None and any(answer in s.shown for s in reply.sections)
    await bot.idle()
    edits = [c for _, c in matrix.sent if (c.get("m.relates_to") or {}).get("rel_type")]
    assert edits, "the reply still quotes the withdrawn message"
    assert edits[-1]["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$reply1"}
    assert EDITED in edits[-1]["m.new_content"]["body"]
    assert answer not in edits[-1]["m.new_content"]["body"]
    await bot.stop()


def test_withdrawn_lately_keeps_the_newest():
    lately = WithdrawnLately(keep=3)
    for e in ("$a", "$b", "$c", "$d"):
        lately.add({e})
    assert lately.among(["$a", "$b", "$c", "$d"]) == {"$b", "$c", "$d"}
    lately.add({"$b"})  # seen again: the newest, so "$c" is the oldest now
    lately.add({"$e"})
    assert lately.among(["$b", "$c", "$d", "$e"]) == {"$b", "$d", "$e"}
