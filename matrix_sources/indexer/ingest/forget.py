"""Forgetting a user on request: everything they said leaves the index, by the path a
redaction takes, and their future messages are refused.

    forget_user(U)   -> event log: every stored message of U loses its text (status
                        `redacted`, secure_delete zeroes it), their edits' text too, the
                        windows that held them marked dirty (redacted), U recorded in
                        `forgotten_users`; WAL emptied
                     -> the pipeline re-chunks those windows (deleting the emptied ones)
                        and compacts, so no vector made from U's words stays in a file;
                        the service edits the bot's answers that quoted them
                        (report.event_ids, as for redactions)
                     -> from now on U's messages are refused: rule `user_forgotten`
    unforget_user(U) -> messages U sends from now on are admitted again; the old ones
                        stay out (never restored, even if backfill reads them again)

One function for every way in: `matrix-sources forget` (directly, or through the running
service's spool, spool.py), and later `!sources forget me` and a Synapse erasure. The
journal gets ids and counts, never text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..clock import REAL, Clock
from ..records import EventID, UserID
from .admit import Ingest
from .gate import USER_FORGOTTEN

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ForgetReport:
    user_id: UserID
    messages: int  # events whose text was dropped, by this run
    windows: int  # stored windows re-chunked without them
    event_ids: tuple[EventID, ...] = ()  # for the edits of answers that quoted them
    # By the whole forget: with the runs before this one since the user was forgotten
    # (one a crash cut off before it answered, whose command or request runs again).
    total: int = 0


@dataclass
class Forgetting:
    ingest: Ingest
    clock: Clock = REAL  # its wall clock stamps the forgetting

    def forget_user(self, user_id: UserID, source: str = "cli") -> ForgetReport:
        now = self.clock.now_ms()
        event_ids, windows, total = self.ingest.eventlog.history.forget_sender(user_id, now, source)
        self.ingest.forgotten[user_id] = None
        report = ForgetReport(user_id, len(event_ids), windows, tuple(event_ids), total)
        self.ingest.journal.write(
            "forget",
            rule=USER_FORGOTTEN,
            user_id=user_id,
            messages=report.messages,
            windows=windows,
            source=source,
            total=total,
        )
        log.warning(
            "user_forgotten",
            extra={
                "user_id": user_id,
                "messages": report.messages,
                "windows": windows,
                "source": source,
                "total": total,
            },
        )
        return report

    def unforget_user(self, user_id: UserID, source: str = "cli") -> bool:
        now = self.clock.now_ms()
        if not self.ingest.eventlog.history.readmit_sender(user_id, now):
            return False
        self.ingest.forgotten[user_id] = now
        self.ingest.journal.write("unforget", rule=USER_FORGOTTEN, user_id=user_id, source=source)
        log.warning("user_readmitted", extra={"user_id": user_id, "source": source})
        return True

    def forgotten(self) -> list[UserID]:
        """Users whose messages are refused now (`forget --list`)."""
        return [u for u, r in self.ingest.eventlog.history.forgotten_users().items() if r is None]


def apply_request(forgetting: Forgetting, request: dict, source: str = "cli") -> dict:
    """A `matrix-sources forget` request ({"op": "forget"|"undo"|"list", "user_id"}),
    applied here or by the running service (spool.py); the answer holds counts and ids."""
    op, user = request.get("op"), request.get("user_id")
    if op == "list":
        return {"op": op, "users": forgetting.forgotten()}
    if not isinstance(user, str) or not user.startswith("@") or ":" not in user:
        return {"op": op, "error": f"{user!r} is not a user id like @name:server"}
    if op == "forget":
        r = forgetting.forget_user(UserID(user), source)
        # The whole forget's count: a request served again after a crash is the same one.
        return {
            "op": op,
            "user_id": user,
            "messages": r.total,
            "windows": r.windows,
            "event_ids": list(r.event_ids),
        }
    if op == "undo":
        return {"op": op, "user_id": user, "undone": forgetting.unforget_user(UserID(user), source)}
    return {"op": op, "error": f"unknown operation {op!r}"}
