"""A Synapse erasure reaching the index.

Synapse keeps serving an erased user's old messages, unredacted, to members who were in
the room (synapse#8185), the bot among them: the index would keep them for ever. A
deactivation parts the user from every room, so

    m.room.member leave of a user, by that user (not a kick), in an allowlisted room
        -> (homeserver.admin_token_file set) GET /_synapse/admin/v2/users/<user>
           erased: true -> forget_user(user, source=synapse_erasure): the redaction path
           not erased -> asked again once a few seconds later (the flag and the parting
                         race in Synapse), then left alone
        each user asked at most once per RECHECK_S, however many rooms they leave

Without the token nothing is asked and `matrix-sources forget` is the way (docs/
deployment.md, "Erasure").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from indexer.clock import REAL, Clock

from ..httpclient import HttpClient

log = logging.getLogger(f"matrix_sources.{__name__}")

RECHECK_S = 600.0  # a user asked about again only after this long
RETRY_AFTER_S = (5.0, 30.0)  # not erased yet: asked again after these
ADMIN_TIMEOUT_S = 10.0


def self_leaves(events: list[Any], bot_user: str) -> set[str]:
    """Users who left a room on their own in these raw events (not the bot, not kicked)."""
    out = set()
    for ev in events:
        if not isinstance(ev, dict) or ev.get("type") != "m.room.member":
            continue
        user, content = ev.get("state_key"), ev.get("content")
        if (
            isinstance(user, str)
            and user != bot_user
            and user == ev.get("sender")
            and isinstance(content, dict)
            and content.get("membership") == "leave"
        ):
            out.add(user)
    return out


class ErasureWatch:
    def __init__(
        self,
        homeserver_url: str,
        admin_token: str,
        on_erased: Callable[[str], Awaitable[None]],
        clock: Clock = REAL,
    ) -> None:
        self._admin = HttpClient(homeserver_url, admin_token, ADMIN_TIMEOUT_S)
        self._on_erased, self._clock = on_erased, clock
        self._asked: dict[str, float] = {}
        self._tasks: set[asyncio.Task] = set()

    def saw_leaves(self, users: set[str]) -> None:
        now = self._clock.now()
        for user in sorted(users):
            if now - self._asked.get(user, float("-inf")) < RECHECK_S:
                continue
            self._asked[user] = now
            task = asyncio.create_task(self._check(user), name="erasure-check")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def erased(self, user: str) -> bool:
        resp = await self._admin.call_async(
            "GET", f"/_synapse/admin/v2/users/{quote(user, safe='')}"
        )
        if resp.status != 200:
            log.warning("erasure_check_refused", extra={"user_id": user, "status": resp.status})
            return False
        body = resp.data
        return isinstance(body, dict) and body.get("erased") is True

    async def _check(self, user: str) -> None:
        for wait in (0.0, *RETRY_AFTER_S):
            if wait:
                await self._clock.sleep(wait)
            try:
                if await self.erased(user):
                    log.warning("user_erased_by_homeserver", extra={"user_id": user})
                    await self._on_erased(user)
                    return
            except Exception:
                log.warning("erasure_check_failed", exc_info=True, extra={"user_id": user})

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
