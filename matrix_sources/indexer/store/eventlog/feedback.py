"""Feedback on the bot's answers, for the moderators' report (DESIGN.md, Stores): what
was asked, whether anything matched, and the votes on the answers. `EventLog.feedback`.

    a search answered in an indexed room -> feedback_questions: ids, the asker, hits;
                                            the question's text only when nothing matched
    👍 👎 on an answer, ✅ by its asker    -> feedback_votes: ids, the voter, the vote
    a redaction of either                 -> its row deleted (a question's with the
                                            votes on its answer)
    forget, erasure (forget_user_in)      -> the person's questions and votes deleted
    the room purged (forget_room_in)      -> the room's rows deleted
    moderation.keep_days passed (expire)  -> the rows older than that deleted

Nothing else is kept: no answered question's text, no reaction's key beyond its vote.
Where a text goes, the WAL is emptied after (SQLite keeps page images there), as the
redaction path does. Votes never reach ranking: search reads none of this.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ...records import EventID, RoomID, UserID
from .db import Database
from .sqldialect import Cursor
from .texts import _chunks


class Vote(StrEnum):
    UP = "up"  # 👍 from anyone
    DOWN = "down"  # 👎 from anyone
    SOLVED = "solved"  # ✅ from the person who asked


@dataclass(frozen=True, slots=True)
class Asked:
    """A search the bot answered in an indexed room."""

    command_event_id: EventID
    room_id: RoomID
    asker: UserID
    asked_at: int  # ms, the service's clock
    reply_event_id: EventID
    hits: int  # 0: "nothing matches"
    text: str | None = None  # the question; kept only when nothing matched


@dataclass(frozen=True, slots=True)
class Reaction:
    """A vote on one of the bot's answers (`m.reaction`, its key folded to a Vote)."""

    event_id: EventID  # the reaction's own: a redaction names it
    room_id: RoomID
    sender: UserID
    target: EventID  # the answer reacted to
    vote: Vote
    at: int  # ms, the service's clock


@dataclass(frozen=True, slots=True)
class RoomFigures:
    room_id: RoomID
    asked: int = 0
    answered: int = 0  # at least one hit
    nothing_matched: int = 0
    up: int = 0  # each counts once per person and answer (👍 and 👍🏽 are one vote)
    down: int = 0
    solved: int = 0


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A question that got "nothing matches", with its text."""

    event_id: EventID  # the asking event
    room_id: RoomID
    text: str
    asked_at: int


class FeedbackTables:
    """feedback_questions and feedback_votes (schema migration 13); the bot writes them,
    `report` and the digest read them."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, asked: Asked) -> bool:
        """Keep a search's answer; False when its command was redacted meanwhile (the
        redaction came first: the row would outlive it)."""
        text = asked.text if asked.hits == 0 else None
        with self.db.transaction() as cur:
            if cur.execute(
                "SELECT 1 FROM redactions WHERE target = ?", (asked.command_event_id,)
            ).fetchone():
                return False
            cur.execute(
                "INSERT INTO feedback_questions (command_event_id, room_id, asker, asked_at,"
                " reply_event_id, hits, text) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (
                    asked.command_event_id,
                    asked.room_id,
                    asked.asker,
                    asked.asked_at,
                    asked.reply_event_id,
                    asked.hits,
                    text,
                ),
            )
            return cur.rowcount > 0

    def react(self, reactions: Sequence[Reaction]) -> list[Reaction]:
        """Count the reactions that are votes on a kept answer of their room (✅ only
        from its asker); the others are ignored. One transaction for the batch.
        Returns those counted now (a reaction seen before is not counted again)."""
        if not reactions:
            return []
        counted: list[Reaction] = []
        with self.db.transaction() as cur:
            answers: dict[str, tuple[str, str]] = {}
            targets: list[str] = sorted({r.target for r in reactions})
            for part in _chunks(targets):
                answers.update(
                    (row[0], (row[1], row[2]))
                    for row in cur.execute(
                        "SELECT reply_event_id, room_id, asker FROM feedback_questions WHERE"
                        f" reply_event_id IN ({','.join('?' * len(part))})",
                        part,
                    )
                )
            for r in reactions:
                answer = answers.get(r.target)
                if answer is None or answer[0] != r.room_id:
                    continue  # not one of the bot's kept answers in that room
                if r.vote is Vote.SOLVED and answer[1] != r.sender:
                    continue  # only the person who asked can say it solved it
                if cur.execute(
                    "SELECT 1 FROM redactions WHERE target = ?", (r.event_id,)
                ).fetchone():
                    continue
                cur.execute(
                    "INSERT INTO feedback_votes (reaction_event_id, reply_event_id,"
                    " room_id, sender, vote, voted_at) VALUES (?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING",
                    (r.event_id, r.target, r.room_id, r.sender, r.vote.value, r.at),
                )
                if cur.rowcount:
                    counted.append(r)
        return counted

    def withdraw(self, event_ids: Iterable[EventID]) -> int:
        """Redactions: the votes and questions they name leave the report, a question
        with the votes on its answer. Returns how many rows went."""
        ids: list[str] = sorted(set(event_ids))
        if not ids:
            return 0
        gone = texts = 0
        with self.db.locked():  # the WAL emptied before anything else writes
            with self.db.transaction() as cur:
                for part in _chunks(ids):
                    marks = ",".join("?" * len(part))
                    cur.execute(
                        f"DELETE FROM feedback_votes WHERE reaction_event_id IN"
                        f" ({marks}) OR reply_event_id IN (SELECT reply_event_id FROM"
                        f" feedback_questions WHERE command_event_id IN ({marks}))",
                        part + part,
                    )
                    gone += cur.rowcount
                    texts += _count(
                        cur,
                        "SELECT COUNT(*) FROM feedback_questions WHERE text"
                        f" IS NOT NULL AND command_event_id IN ({marks})",
                        part,
                    )
                    cur.execute(
                        f"DELETE FROM feedback_questions WHERE command_event_id IN ({marks})", part
                    )
                    gone += cur.rowcount
            if texts:
                self.db.truncate_wal()
        return gone

    def expire(self, cutoff_ms: int) -> int:
        """moderation.keep_days: every row from before `cutoff_ms` goes."""
        with self.db.locked():
            with self.db.transaction() as cur:
                texts = _count(
                    cur,
                    "SELECT COUNT(*) FROM feedback_questions WHERE"
                    " asked_at < ? AND text IS NOT NULL",
                    (cutoff_ms,),
                )
                cur.execute(
                    "DELETE FROM feedback_votes WHERE voted_at < ? OR reply_event_id"
                    " IN (SELECT reply_event_id FROM feedback_questions WHERE"
                    " asked_at < ?)",
                    (cutoff_ms, cutoff_ms),
                )
                gone = cur.rowcount
                cur.execute("DELETE FROM feedback_questions WHERE asked_at < ?", (cutoff_ms,))
                gone += cur.rowcount
            if texts:
                self.db.truncate_wal()
        return gone

    # -- the report's reads -----------------------------------------------------------

    def rooms(self, since_ms: int) -> list[RoomID]:
        """The rooms with any question or vote since `since_ms`."""
        with self.db.transaction(immediate=False) as cur:
            rows = cur.execute(
                "SELECT room_id FROM feedback_questions WHERE asked_at >= ?"
                " UNION SELECT room_id FROM feedback_votes WHERE voted_at >= ?",
                (since_ms, since_ms),
            ).fetchall()
        return sorted(RoomID(r[0]) for r in rows)

    def figures(self, room_id: RoomID, since_ms: int) -> RoomFigures:
        with self.db.transaction(immediate=False) as cur:
            asked = _count(
                cur,
                "SELECT COUNT(*) FROM feedback_questions WHERE room_id = ? AND asked_at >= ?",
                (room_id, since_ms),
            )
            answered = _count(
                cur,
                "SELECT COUNT(*) FROM feedback_questions WHERE room_id = ?"
                " AND asked_at >= ? AND hits > 0",
                (room_id, since_ms),
            )
            votes = dict(
                cur.execute(
                    "SELECT vote, COUNT(*) FROM (SELECT DISTINCT reply_event_id, sender, vote"
                    " FROM feedback_votes WHERE room_id = ? AND voted_at >= ?) AS v"
                    " GROUP BY vote",
                    (room_id, since_ms),
                ).fetchall()
            )
        return RoomFigures(
            room_id,
            asked,
            answered,
            asked - answered,
            votes.get(Vote.UP.value, 0),
            votes.get(Vote.DOWN.value, 0),
            votes.get(Vote.SOLVED.value, 0),
        )

    def unanswered(self, room_id: RoomID, since_ms: int) -> list[Unanswered]:
        """The room's questions that got "nothing matches" since `since_ms`, oldest first."""
        with self.db.transaction(immediate=False) as cur:
            rows = cur.execute(
                "SELECT command_event_id, room_id, text, asked_at FROM feedback_questions"
                " WHERE room_id = ? AND asked_at >= ? AND hits = 0 AND text IS NOT NULL"
                " ORDER BY asked_at, command_event_id",
                (room_id, since_ms),
            ).fetchall()
        return [Unanswered(EventID(e), RoomID(r), t, at) for e, r, t, at in rows]


# -- inside the transactions of the withdrawals (history.py, log.py) ----------------------


def forget_user_in(cur: Cursor, user_id: UserID) -> None:
    """`forget`, `forget me`, an erasure: the person's questions (and the votes on the
    answers to them) and their votes go."""
    cur.execute(
        "DELETE FROM feedback_votes WHERE sender = ? OR reply_event_id IN (SELECT"
        " reply_event_id FROM feedback_questions WHERE asker = ?)",
        (user_id, user_id),
    )
    cur.execute("DELETE FROM feedback_questions WHERE asker = ?", (user_id,))


def forget_user_in_room(cur: Cursor, user_id: UserID, room_id: RoomID) -> None:
    """A server ACL denied the person's server in the room: their questions there (and
    the votes on the answers to them) and their votes there go."""
    cur.execute(
        "DELETE FROM feedback_votes WHERE room_id = ? AND (sender = ? OR reply_event_id IN"
        " (SELECT reply_event_id FROM feedback_questions WHERE room_id = ? AND asker = ?))",
        (room_id, user_id, room_id, user_id),
    )
    cur.execute(
        "DELETE FROM feedback_questions WHERE room_id = ? AND asker = ?", (room_id, user_id)
    )


def forget_room_in(cur: Cursor, room_id: RoomID) -> None:
    """A purged room (refused after the fact, the bot sent away): its feedback goes."""
    cur.execute("DELETE FROM feedback_questions WHERE room_id = ?", (room_id,))
    cur.execute("DELETE FROM feedback_votes WHERE room_id = ?", (room_id,))


def expire_room_in(cur: Cursor, room_id: RoomID, cutoff_ts: int) -> int:
    """Room retention: the room's questions asked before `cutoff_ts` go, as its messages
    do. Returns how many held a text."""
    texts = _count(
        cur,
        "SELECT COUNT(*) FROM feedback_questions WHERE room_id = ? AND"
        " asked_at < ? AND text IS NOT NULL",
        (room_id, cutoff_ts),
    )
    cur.execute(
        "DELETE FROM feedback_votes WHERE reply_event_id IN (SELECT reply_event_id"
        " FROM feedback_questions WHERE room_id = ? AND asked_at < ?)",
        (room_id, cutoff_ts),
    )
    cur.execute(
        "DELETE FROM feedback_questions WHERE room_id = ? AND asked_at < ?", (room_id, cutoff_ts)
    )
    return texts


def _count(cur: Cursor, sql: str, args: Sequence[object]) -> int:
    row = cur.execute(sql, args).fetchone()
    return int(row[0]) if row else 0
